"""What one push delivery carries and what became of it: the command notification a worker reads
(:class:`Notification`), the outcome Pub/Sub acks (:class:`Handled`), the commands handed over
without a delivery (:class:`HandedOver`), and the errors that decide
between "never retried" (:class:`BadNotification`, 400) and "redelivered" (:class:`ControlPlaneRefused`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from noetl_cloud.errors import BadRequest
from noetl_cloud.web.client import UpstreamUnavailable

_SNOWFLAKE_DIGITS = 19

HandledOutcome = Literal[
    "reported",  # the report was accepted
    "duplicate",  # the command was already terminal; the report changed nothing
    "already_claimed",  # another delivery or worker holds the command
    "execution_terminal",  # the execution ended before the claim
    "not_found",  # no such command
    "lease_lost",  # the lease went to someone else, seen by a heartbeat or by the report
    "stopped",  # the execution ended while the command ran: nothing reported
    "rejected",  # the control plane refused the claim or the report for good (4xx)
]


class BadNotification(BadRequest):
    """A command notification without the references it must carry (never retried)."""

    code = "invalid_notification"


class ControlPlaneRefused(UpstreamUnavailable):
    """The control plane refused this worker's credentials: a deployment problem, so the delivery is retried."""

    code = "control_plane_refused"


@dataclass(frozen=True)
class Notification:
    """The message on ``noetl-commands-<pool>``: references only."""

    execution_id: str
    command_id: str
    event_id: str | None = None
    step: str | None = None
    attempt: int | None = None
    traceparent: str | None = None

    @classmethod
    def from_mapping(cls, data: Any) -> Notification:
        """Read a notification; :class:`BadNotification` (400) when ``command_id`` or ``execution_id`` is
        missing or not a snowflake id."""
        if not isinstance(data, Mapping):
            raise BadNotification("a command notification is a JSON object")
        ids = {}
        for name in ("execution_id", "command_id"):
            value = data.get(name)
            value = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
            if not isinstance(value, str) or not value.isascii() or not value.isdigit():
                raise BadNotification(f"the notification has no valid {name}", details={"field": name})
            if len(value) > _SNOWFLAKE_DIGITS:
                raise BadNotification(f"the notification has no valid {name}", details={"field": name})
            ids[name] = value
        attempt = data.get("attempt")
        if isinstance(attempt, str) and attempt.isascii() and attempt.isdigit():
            attempt = int(attempt)
        return cls(
            execution_id=ids["execution_id"],
            command_id=ids["command_id"],
            event_id=_text(data.get("event_id")),
            step=_text(data.get("step")),
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
            traceparent=_text(data.get("traceparent")),
        )


@dataclass(frozen=True)
class Handled:
    """What became of one delivery that Pub/Sub should ack."""

    outcome: HandledOutcome
    command_id: str
    status: Literal["ok", "error"] | None = None  # the run's status when it ran to its end

    def body(self) -> dict[str, Any]:
        """The JSON answer of the push endpoint."""
        body: dict[str, Any] = {"outcome": self.outcome, "command_id": self.command_id}
        if self.status is not None:
            body["status"] = self.status
        return body


class HandedOver:
    """The (command id, attempt) pairs the control plane handed this process in report answers, the
    last ``size`` of them. A command handed over from its pool's queue still has its notification on
    the way; when it arrives, this process already holds the claim and acks it without asking the
    control plane (whose answer would be ``already_claimed``). A re-issued command comes with the next
    attempt, which this process was never handed, so it is claimed as any other. Thread-safe."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._pairs: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, command: Mapping[str, Any]) -> None:
        """Remember a handed command document (one without a command id or attempt is not remembered)."""
        cid, attempt = command.get("command_id"), command.get("attempt")
        if cid is None or not isinstance(attempt, int) or isinstance(attempt, bool):
            return
        with self._lock:
            self._pairs[(str(cid), attempt)] = None
            while len(self._pairs) > self._size:
                self._pairs.popitem(last=False)

    def holds(self, note: Notification) -> bool:
        """Whether ``note`` announces a command attempt this process was handed."""
        if note.attempt is None:
            return False
        with self._lock:
            return (note.command_id, note.attempt) in self._pairs


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
