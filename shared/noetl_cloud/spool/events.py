"""Spool events (subscription-listener RFC §8.4): what they carry, where they go, how none is lost.

Every spool operation is an event in the control plane's log, so an outage can be reconstructed
from it: ``subscription.message.spooled`` / ``replayed`` / ``dead_lettered`` / ``dropped``,
``subscription.spool.draining`` / ``recovered`` / ``alert`` and ``subscription.circuit.opened`` /
``closed``. Payload bytes stay in the spool object; events carry metadata and a
``noetl://spool/...`` reference.

**Exactly one record each.** Every event has an idempotency key derived from what it records
(the item's object name, the circuit and the moment it opened, one drain run), and the event log
keeps at most one event per key. Writing an event again is therefore always safe.

**Never lost.** The roles that spool have no database: events reach the log through
``POST /api/internal/spool/events`` (:class:`ApiEventSink`). When the control plane cannot take
them -- which is exactly when the circuit of the control plane opens -- :class:`EventJournal`
parks them in a per-subscription journal document in the coordination store (Firestore) and the
drainer flushes it later, with the original event times. A ``spooled`` event is not parked: the
spool item is its durable record, and the drainer writes the event (with the item's
``spooled_at``) before the item can leave the spool.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol

from noetl_cloud.envelope import format_time, parse_time, utc_now
from noetl_cloud.errors import NoetlError, Unavailable
from noetl_cloud.kv.port import KeyValueStore, VersionConflict

log = logging.getLogger(__name__)

SPOOLED: Final = "subscription.message.spooled"
REPLAYED: Final = "subscription.message.replayed"
DEAD_LETTERED: Final = "subscription.message.dead_lettered"
DROPPED: Final = "subscription.message.dropped"
RESENT: Final = "subscription.message.resent"
DRAINING: Final = "subscription.spool.draining"
RECOVERED: Final = "subscription.spool.recovered"
ALERT: Final = "subscription.spool.alert"
CIRCUIT_OPENED: Final = "subscription.circuit.opened"
CIRCUIT_CLOSED: Final = "subscription.circuit.closed"
EVENT_TYPES: Final = (
    SPOOLED,
    REPLAYED,
    DEAD_LETTERED,
    DROPPED,
    RESENT,
    DRAINING,
    RECOVERED,
    ALERT,
    CIRCUIT_OPENED,
    CIRCUIT_CLOSED,
)
SPOOL_REF_SCHEME: Final = "noetl://spool/"
JOURNAL_PREFIX: Final = "spool/journal/"
MAX_JOURNAL: Final = 500
SINK_BACKOFF_S: Final = 5.0

Subject = Literal["subscription", "circuit"]


def spool_ref(name: str) -> str:
    """The ``noetl://spool/<object name>`` reference of a spooled object."""
    return SPOOL_REF_SCHEME + name


def _key(event_type: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]
    return f"{event_type}:{digest}"


@dataclass(frozen=True)
class SpoolEvent:
    """One event to record. ``subject`` is the subscription path, or the downstream of a circuit
    event (``aggregate == "circuit"``); the control plane appends it to ``spool/<subject>`` or
    ``circuit/<subject>``."""

    event_type: str
    aggregate: Subject
    subject: str
    payload: dict[str, Any]
    idempotency_key: str
    event_time: datetime = field(default_factory=utc_now)

    def to_wire(self) -> dict[str, Any]:
        return {
            "event_type": self.event_type,
            "aggregate": self.aggregate,
            "subject": self.subject,
            "payload": self.payload,
            "idempotency_key": self.idempotency_key,
            "event_time": format_time(self.event_time),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SpoolEvent:
        return cls(
            event_type=str(data["event_type"]),
            aggregate=data["aggregate"],
            subject=str(data["subject"]),
            payload=dict(data["payload"]),
            idempotency_key=str(data["idempotency_key"]),
            event_time=parse_time(data["event_time"]),
        )


# -- the events of the RFC -----------------------------------------------------------------------


def _item_fields(item: Any, name: str) -> dict[str, Any]:
    return {
        "subscription": item.subscription,
        "message_id": item.message_id,
        "recv_seq": str(item.recv_seq),
        "lane": item.lane,
        "ordering_key": item.ordering_key,
        "spool_ref": spool_ref(name),
        "sha256": item.sha256,
    }


def spooled(item: Any, name: str, backend: str) -> SpoolEvent:
    """``{message_id, recv_seq, spool_ref, reason, sha256}`` at the item's own ``spooled_at``."""
    payload = {
        **_item_fields(item, name),
        "reason": item.reason,
        "payload_bytes": item.payload_bytes,
        "backend": backend,
        "idempotency_key": item.idempotency_key,
    }
    return SpoolEvent(SPOOLED, "subscription", item.subscription, payload, _key(SPOOLED, name), item.spooled_at)


def replayed(item: Any, name: str, execution_id: str | None, *, duplicate: bool, attempts: int) -> SpoolEvent:
    payload = {
        **_item_fields(item, name),
        "execution_id": execution_id,
        "duplicate": duplicate,
        "attempts": attempts,
    }
    return SpoolEvent(REPLAYED, "subscription", item.subscription, payload, _key(REPLAYED, name))


def dead_lettered(
    item: Any, name: str, dlq_name: str, reason: str, *, attempts: int, detail: str | None = None
) -> SpoolEvent:
    payload = {
        **_item_fields(item, name),
        "reason": reason,
        "attempts": attempts,
        "dlq_ref": spool_ref(dlq_name),
    }
    if detail:
        payload["detail"] = detail[:512]
    return SpoolEvent(DEAD_LETTERED, "subscription", item.subscription, payload, _key(DEAD_LETTERED, name))


def dropped(item: Any, dlq_name: str, reason: str, *, bytes_used: int, max_bytes: int) -> SpoolEvent:
    """A message that was not spooled: written straight under the dead-letter prefix (``drop_to_dlq``)."""
    payload = {
        **_item_fields(item, dlq_name),
        "reason": reason,
        "dlq_ref": spool_ref(dlq_name),
        "bytes_used": bytes_used,
        "max_bytes": max_bytes,
    }
    return SpoolEvent(DROPPED, "subscription", item.subscription, payload, _key(DROPPED, dlq_name))


def resent(item: Any, dlq_name: str, live_name: str, *, by: str | None, operation_id: str | None) -> SpoolEvent:
    """An operator moved a dead letter back to its lane (each resend is its own event: a fresh key)."""
    payload = {
        **_item_fields(item, live_name),
        "dlq_ref": spool_ref(dlq_name),
        "dlq_reason": item.dlq_reason,
        "attempts": item.attempts,
        "by": by,
        "operation_id": operation_id,
    }
    return SpoolEvent(RESENT, "subscription", item.subscription, payload, _key(RESENT, dlq_name, uuid.uuid4().hex))


def draining(subscription: str, run_id: str, *, items: int, bytes_used: int, lanes: int, ordering: str) -> SpoolEvent:
    payload = {
        "subscription": subscription,
        "drain_id": run_id,
        "items": items,
        "bytes": bytes_used,
        "lanes": lanes,
        "ordering": ordering,
    }
    return SpoolEvent(DRAINING, "subscription", subscription, payload, _key(DRAINING, subscription, run_id))


def recovered(
    subscription: str, run_id: str, *, replayed_count: int, dead_lettered_count: int, duration_ms: int
) -> SpoolEvent:
    payload = {
        "subscription": subscription,
        "drain_id": run_id,
        "replayed": replayed_count,
        "dead_lettered": dead_lettered_count,
        "duration_ms": duration_ms,
    }
    return SpoolEvent(RECOVERED, "subscription", subscription, payload, _key(RECOVERED, subscription, run_id))


def alert(subscription: str, reason: str, window: str, **details: Any) -> SpoolEvent:
    """At most one per (subscription, reason, ``window``): ``window`` is a minute for ``spool_full``,
    the halted item for ``global_lane_halted``."""
    payload = {"subscription": subscription, "reason": reason, **details}
    return SpoolEvent(ALERT, "subscription", subscription, payload, _key(ALERT, subscription, reason, window))


def circuit_opened(downstream: str, subscription: str, opened_at: datetime, failures: int) -> SpoolEvent:
    payload = {
        "downstream": downstream,
        "subscription": subscription,
        "opened_at": format_time(opened_at),
        "consecutive_failures": failures,
    }
    key = _key(CIRCUIT_OPENED, downstream, format_time(opened_at))
    return SpoolEvent(CIRCUIT_OPENED, "circuit", downstream, payload, key, opened_at)


def circuit_closed(
    downstream: str, subscription: str, outage_since: datetime | None, closed_at: datetime
) -> SpoolEvent:
    since = format_time(outage_since) if outage_since else format_time(closed_at)
    payload = {
        "downstream": downstream,
        "subscription": subscription,
        "outage_since": since,
        "closed_at": format_time(closed_at),
    }
    return SpoolEvent(
        CIRCUIT_CLOSED, "circuit", downstream, payload, _key(CIRCUIT_CLOSED, downstream, since), closed_at
    )


# -- where events go -----------------------------------------------------------------------------


class EventSink(Protocol):
    """Records events in the event log; each idempotency key at most once."""

    def record(self, events: Sequence[SpoolEvent]) -> int:
        """Record ``events`` (already recorded ones count as done); how many were new.

        Raises :class:`~noetl_cloud.errors.Unavailable` when the log cannot take them now.
        """
        ...


class MemoryEventSink:
    """The event log in memory (unit tests, the embedded local mode). ``down`` refuses every write."""

    def __init__(self) -> None:
        self.events: list[SpoolEvent] = []
        self.down = False
        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def record(self, events: Sequence[SpoolEvent]) -> int:
        if self.down:
            raise Unavailable("the event log is down", code="event_log_unavailable")
        new = 0
        with self._lock:
            for event in events:
                if event.idempotency_key not in self._keys:
                    self._keys.add(event.idempotency_key)
                    self.events.append(event)
                    new += 1
        return new

    def of_type(self, event_type: str) -> list[SpoolEvent]:
        return [e for e in self.events if e.event_type == event_type]


class ApiEventSink:
    """``POST /api/internal/spool/events`` of the control plane (any object with the ``ApiClient`` ``post``)."""

    PATH: Final = "/api/internal/spool/events"

    def __init__(self, api: Any) -> None:
        self.api = api

    def record(self, events: Sequence[SpoolEvent]) -> int:
        if not events:
            return 0
        try:
            response = self.api.post(self.PATH, json={"events": [e.to_wire() for e in events]})
        except NoetlError as exc:
            raise Unavailable("the control plane did not take the spool events", code="event_log_unavailable") from exc
        if response.status >= 500:
            raise Unavailable(f"the control plane answered {response.status}", code="event_log_unavailable")
        response.raise_for_error()
        body = response.json if isinstance(response.json, dict) else {}
        return int(body.get("recorded", 0))


class EventJournal:
    """Events to a sink, parked in the coordination store while the sink is down.

    ``emit`` records at once when it can, else appends to ``spool/journal/<subscription>`` (a
    compare-and-set, bounded to :data:`MAX_JOURNAL` events; past that the oldest alerts give way,
    and a journal with no room left logs what it had to drop). ``flush`` records the parked events
    and removes exactly those. After a failure of the sink, direct writes are skipped for
    ``backoff_s`` so a spool write during an outage does not wait on a dead control plane.
    """

    def __init__(
        self,
        sink: EventSink,
        kv: KeyValueStore,
        *,
        backoff_s: float = SINK_BACKOFF_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.kv = kv
        self.backoff_s = backoff_s
        self._monotonic = monotonic
        self._down_until = 0.0

    def _sink_down(self) -> bool:
        return self._monotonic() < self._down_until

    def try_record(self, events: Sequence[SpoolEvent]) -> bool:
        """Record now if the sink takes them; ``False`` (nothing parked) otherwise."""
        if not events:
            return True
        if self._sink_down():
            return False
        try:
            self.sink.record(events)
        except Unavailable:
            self._down_until = self._monotonic() + self.backoff_s
            return False
        return True

    def emit(self, journal: str, events: Sequence[SpoolEvent]) -> None:
        """Record ``events``, or park them in ``journal``'s document until :meth:`flush`."""
        if not self.try_record(events):
            self.park(journal, events)

    def park(self, journal: str, events: Sequence[SpoolEvent]) -> None:
        key = JOURNAL_PREFIX + journal
        for _attempt in range(32):
            entry = self.kv.get(key)
            parked: list[dict[str, Any]] = list(entry.value.get("events", [])) if entry else []
            known = {p["idempotency_key"] for p in parked}
            parked += [e.to_wire() for e in events if e.idempotency_key not in known]
            while len(parked) > MAX_JOURNAL:
                alerts = [i for i, p in enumerate(parked) if p["event_type"] == ALERT]
                lost = parked.pop(alerts[0] if alerts else 0)
                log.error("spool event journal full: an event was dropped", extra={"event_type": lost["event_type"]})
            try:
                self.kv.compare_and_set(key, {"events": parked}, expected_version=entry.version if entry else None)
                return
            except VersionConflict:
                continue
        raise Unavailable("the spool event journal stayed contended", code="journal_contended")

    def parked(self, journal: str) -> list[SpoolEvent]:
        entry = self.kv.get(JOURNAL_PREFIX + journal)
        return [SpoolEvent.from_wire(p) for p in entry.value.get("events", [])] if entry else []

    def flush(self, journal: str) -> int:
        """Record every parked event of ``journal`` and forget them; how many were flushed.

        Raises :class:`~noetl_cloud.errors.Unavailable` (and keeps them) when the sink is down.
        """
        key = JOURNAL_PREFIX + journal
        entry = self.kv.get(key)
        if entry is None or not entry.value.get("events"):
            return 0
        events = [SpoolEvent.from_wire(p) for p in entry.value["events"]]
        self.sink.record(events)
        done = {e.idempotency_key for e in events}
        for _attempt in range(32):
            entry = self.kv.get(key)
            if entry is None:
                return len(events)
            rest = [p for p in entry.value.get("events", []) if p["idempotency_key"] not in done]
            try:
                if rest:
                    self.kv.compare_and_set(key, {"events": rest}, expected_version=entry.version)
                else:
                    self.kv.delete(key, expected_version=entry.version)
                return len(events)
            except VersionConflict:
                continue
        return len(events)
