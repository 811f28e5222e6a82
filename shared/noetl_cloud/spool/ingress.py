"""The spool as the ingress sees it: the ``Spooler`` seam of :class:`~noetl_cloud.ingress.service.IngressService`.

A push source cannot be trusted to redeliver, so for a push delivery ``buffer_and_ack`` and
``hybrid`` both spool (RFC §8.2); ``off`` never reaches the spool (the ingress answers 503 and the
source owns the message). The payload spooled is the workload the forward would have sent, as
exact bytes; the plan is the verified dispatch plan plus the request around it (route, pool,
trace, dedup, meta), so a replay never reads the message's headers again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from noetl_cloud.ingress.directives import last_value
from noetl_cloud.ingress.push import PushMessage
from noetl_cloud.spool.engine import Gate, SpoolEngine, payload_bytes
from noetl_cloud.spool.policy import lane_of
from noetl_cloud.spool.target import SpoolTarget

# ``ordering_key`` names a header / attribute; these names mean the Pub/Sub message's own key.
PUBSUB_ORDERING_NAMES = frozenset({"orderingkey", "ordering_key", "x-goog-pubsub-ordering-key"})


def ordering_value(message: PushMessage, name: str | None) -> str | None:
    """The value of the ``ordering_key`` header / attribute of a message (``None`` when absent)."""
    if not name:
        return None
    key = name.strip().lower()
    value = last_value(message.message.headers.get(key))
    if value is None:
        value = next((v for k, v in message.attributes.items() if k.lower() == key), None)
    if value is None and key in PUBSUB_ORDERING_NAMES:
        value = message.ordering_key
    return value


class IngressSpooler:
    """Fills the ingress's spool seam with a :class:`SpoolEngine`; ``downstream`` is the execute API."""

    def __init__(self, engine: SpoolEngine, downstream: str) -> None:
        self.engine = engine
        self.downstream = downstream
        self._targets: dict[str, tuple[str, SpoolTarget]] = {}
        self._lock = threading.Lock()

    def target(self, config: Mapping[str, Any]) -> SpoolTarget:
        """The spool target of a listener configuration (parsed once per configuration object)."""
        path = str(config.get("path") or config.get("listener"))
        block = json.dumps([config.get("spool") or {}, config.get("downstreams") or []], sort_keys=True, default=str)
        with self._lock:
            cached = self._targets.get(path)
        if cached is not None and cached[0] == block:
            return cached[1]
        target = SpoolTarget.from_spec(
            path,
            config.get("spool"),
            source_kind="push",
            downstream=self.downstream,
            downstreams=config.get("downstreams"),
        )
        with self._lock:
            self._targets[path] = (block, target)
        return target

    def gate(self, listener: str, config: Mapping[str, Any], message: PushMessage) -> Gate | None:
        """``None`` when this subscription does not spool; else dispatch / probe / spool."""
        target = self.target(config)
        if not target.enabled:
            return None
        # Its lane: once that lane is drained, the message goes straight through (ordered_then_live).
        lane = lane_of(target.spool.ordering, ordering_value(message, target.spool.ordering_key))
        return self.engine.gate(target, lane=lane)

    def forwarded(self, config: Mapping[str, Any], gate: Gate, ok: bool) -> None:
        self.engine.report(self.target(config), gate, ok)

    def spool(
        self,
        listener: str,
        config: Mapping[str, Any],
        message: PushMessage,
        plan: dict[str, Any],
        reason: str = "forward_failed",
    ) -> str:
        """Spool the message; ``spooled`` or ``dropped`` (retention's ``drop_to_dlq``)."""
        target = self.target(config)
        spooled = self.engine.spool(
            target,
            payload_bytes(message.workload()),
            message_id=message.message.message_id,
            source=str(config.get("source") or message.message.source),
            plan=plan,
            reason=reason,
            idempotency_key=plan.get("idempotency_key"),
            ordering_key=ordering_value(message, target.spool.ordering_key),
        )
        return spooled.status
