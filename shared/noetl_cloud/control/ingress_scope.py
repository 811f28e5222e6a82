"""What the ingress role may start: executions of its listeners' playbooks, nothing else.

The route policy (:mod:`noetl_cloud.auth.roles`) admits the ingress to ``POST /api/execute``; this
narrows it to the request's own listener (``meta.listener``, which the ingress always sends): the
playbook must be one that listener's subscription dispatches to - its ``dispatch.playbook`` or a
value a ``dispatch.playbook`` header directive allows. A caller holding only the ingress role that
names another playbook, no listener, or a ``catalog_id`` is refused 403 ``forbidden_target``.

Cheap on the hot path: each listener's targets are kept per process for :data:`TTL_S` seconds, so a
delivery costs a dict lookup; the catalog is read on first use, after the TTL, and once more before a
refusal (a subscription updated since), never otherwise.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from noetl_cloud.auth.roles import INGRESS, POLICY
from noetl_cloud.control.models import ExecuteRequest
from noetl_cloud.errors import Forbidden, NotFound
from noetl_cloud.spec.common import LISTENER_NAME

TTL_S = 60.0
_LISTENER = re.compile(rf"^{LISTENER_NAME}$")
#: The roles that may start any playbook: a caller holding one of them is not narrowed.
UNSCOPED = POLICY["execute"][("POST", "/api/execute")] - {INGRESS}


class ForbiddenTarget(Forbidden):
    """The ingress asked to start what none of its listeners dispatches to."""

    code = "forbidden_target"


class SubscriptionCatalog(Protocol):
    def subscription_for_listener(self, gateway_path: str) -> Any: ...


def scoped(roles: frozenset[str]) -> bool:
    """Whether a caller with ``roles`` may start only its listeners' playbooks (the ingress alone)."""
    return INGRESS in roles and roles.isdisjoint(UNSCOPED)


def targets_of(document: dict[str, Any]) -> frozenset[str]:
    """The playbooks a subscription document dispatches to: ``dispatch.playbook`` and the values its
    ``dispatch.playbook`` directives allow."""
    spec = document.get("spec") or {}
    found = {str(p) for p in [(spec.get("dispatch") or {}).get("playbook")] if p}
    for directive in (spec.get("headers") or {}).get("directives") or []:
        if isinstance(directive, dict) and directive.get("controls") == "dispatch.playbook":
            found |= {str(value) for value in directive.get("allowed") or []}
    return frozenset(found)


class IngressScope:
    def __init__(self, catalog: SubscriptionCatalog, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self.clock = clock
        self._targets: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def check(self, request: ExecuteRequest) -> None:
        """Raise :class:`ForbiddenTarget` unless ``request`` starts a playbook of its own listener."""
        listener = request.meta.get("listener")
        if not isinstance(listener, str) or not _LISTENER.match(listener):
            raise ForbiddenTarget("the ingress starts executions of its listeners only (meta.listener)")
        if request.path is None:
            raise ForbiddenTarget("the ingress starts a listener's playbook by path, not by catalog_id")
        cached = self._targets.get(listener)
        if cached is not None and cached[0] > self.clock() and request.path in cached[1]:
            return
        if request.path not in self._load(listener):
            raise ForbiddenTarget(
                f"listener {listener!r} does not dispatch to {request.path!r}",
                details={"listener": listener, "path": request.path},
            )

    def _load(self, listener: str) -> frozenset[str]:
        try:
            entry = self.catalog.subscription_for_listener(f"/ingress/{listener}")
        except NotFound:
            targets: frozenset[str] = frozenset()
        else:
            targets = targets_of(entry.document)
        with self._lock:
            self._targets[listener] = (self.clock() + TTL_S, targets)
        return targets


__all__ = ["ForbiddenTarget", "IngressScope", "scoped", "targets_of"]
