"""What ``noetl-cloud local status`` reports of a component: :class:`ComponentStatus`, one row per
service, role or the scheduler (``--json`` prints each as a dict), and the running scheduler's own
report of its jobs (:func:`scheduler_report`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class ComponentStatus:
    name: str
    port: int
    pid: int | None
    running: bool
    healthy: bool
    startup_seconds: float | None
    #: ``service`` (PostgreSQL, an emulator) or ``role`` (a deployable, ``functions/<role>``).
    kind: str = "service"
    #: Whether the state folder records it as started (``up`` started it and no ``down`` stopped it yet).
    recorded: bool = False
    #: The scheduler's jobs as it reports them (``GET /status``), when it answers.
    jobs: list[dict[str, Any]] | None = None
    #: The scheduled subscriptions the scheduler's ``subscription-tick`` runs (the execute role's report).
    subscriptions: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def scheduler_report(port: int) -> dict[str, Any]:
    """The running scheduler's report (``GET /status``); ``{}`` when it does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=8) as response:
            body = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return {}
    return body if isinstance(body, dict) else {}
