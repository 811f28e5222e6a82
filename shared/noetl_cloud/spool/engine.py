"""The spool engine: backend + circuit breaker + policy, for the roles that receive messages.

For one message of one subscription (a :class:`~noetl_cloud.spool.target.SpoolTarget`) the engine answers
three questions:

* :meth:`SpoolEngine.gate` -- before the dispatch: dispatch it, dispatch it as the circuit's probe,
  or spool it (the circuit is open; or a backlog is draining and ``on_recovery`` is
  ``ordered_then_live``, so a live message must not overtake it). A mode that stops acking is
  refused with :class:`CircuitOpen` (503: the source keeps the message).
* :meth:`SpoolEngine.report` -- the dispatch's outcome, for the breaker; the caller whose write
  opened or closed the circuit emits ``subscription.circuit.opened`` / ``closed``.
* :meth:`SpoolEngine.spool` -- keep the message: retention first (``max_bytes`` and ``on_full``),
  then one create-only object, then the backlog mark, then (best effort) the ``spooled`` event.

**Order.** From the moment the circuit opens until its backlog has drained, no live message
overtakes a spooled one (under ``ordered_then_live``). A single failed forward below
``trip_after`` is spooled without pausing live traffic (the downstream is not known to be down):
the next drain replays it, possibly after later messages of its lane; ``trip_after: 1`` makes
every failure pause live traffic.

**Who probes.** While spooled items wait, the drainer probes with the oldest of them (a real
dispatch, so a downstream without a health endpoint still recovers); a live message is the probe
only when nothing is spooled. A message spooled while the probe is due, or behind the backlog of
a closed circuit, asks the drainer to probe / drain now (``on_probe_due``, at most once per
``probe_after_ms`` per subscription and process), so recovery under traffic waits for neither the
drainer's schedule nor an operator.

**The backlog mark** (``spool/backlog/<subscription>`` in the
coordination store) says items wait: it is checked after every spool write (but a failed forward
of a closed circuit), and the drainer
removes it only when a listing after the removal still finds the spool empty, so a live message
acknowledged after a spooled one never overtakes it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from noetl_cloud import telemetry
from noetl_cloud.envelope import utc_now
from noetl_cloud.errors import Unavailable
from noetl_cloud.kv.port import Clock, KeyValueStore
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.backends import Backends
from noetl_cloud.spool.circuit import CircuitBreaker, CircuitConfig, CircuitState, circuit_key, probe_due
from noetl_cloud.spool.item import SpoolItem, SpoolItemExists, SpoolRef
from noetl_cloud.spool.policy import (
    Full,
    lane_of,
    may_interleave,
    on_downstream_failure,
    retention_decision,
)
from noetl_cloud.spool.port import SpoolBackend
from noetl_cloud.spool.target import SpoolTarget

log = logging.getLogger(__name__)

BACKLOG_PREFIX: Final = "spool/backlog/"
HALT_PREFIX: Final = "spool/halt/"
SPOOL_FULL: Final = "spool_full"
FORWARD_FAILED: Final = "forward_failed"
DOWNSTREAM_OPEN: Final = "downstream_open"
USAGE_TTL_S: Final = 5.0


class CircuitOpen(Unavailable):
    """The downstream's circuit is open and the spool mode says stop acking (the source keeps it)."""

    code = "circuit_open"
    retry_after = 30


class SpoolFull(Unavailable):
    """Retention's ``max_bytes`` is reached and ``on_full`` is ``stop_acking``."""

    code = "spool_full"
    retry_after = 60


@dataclass(frozen=True)
class Gate:
    """What to do with one message before dispatching it (see :meth:`SpoolEngine.gate`).

    ``holder`` names this dispatch to the breaker; ``state`` is the circuit as read or taken.
    """

    action: Literal["dispatch", "probe", "spool"]
    holder: str
    reason: str | None = None
    state: CircuitState | None = None


@dataclass(frozen=True)
class Spooled:
    """What :meth:`SpoolEngine.spool` did: ``spooled`` (a live item) or ``dropped`` (dead-lettered at once)."""

    status: Literal["spooled", "dropped"]
    ref: SpoolRef
    item: SpoolItem


def payload_bytes(workload: Any) -> bytes:
    """The exact bytes spooled for a workload: compact, key-sorted JSON."""
    return json.dumps(workload, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


class SpoolEngine:
    """The spool, the circuits and the spool events of one process (shared by its requests)."""

    def __init__(
        self,
        kv: KeyValueStore,
        journal: ev.EventJournal,
        backends: Backends,
        *,
        ids: Callable[[], int],
        instance: str | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        usage_ttl_s: float = USAGE_TTL_S,
        on_circuit_closed: Callable[[SpoolTarget], None] | None = None,
        on_probe_due: Callable[[SpoolTarget], None] | None = None,
    ) -> None:
        self.kv = kv
        self.journal = journal
        self.backends = backends
        self.ids = ids
        self.instance = instance or uuid.uuid4().hex[:12]
        self.clock = clock
        self.monotonic = monotonic
        self.usage_ttl_s = usage_ttl_s
        self.on_circuit_closed = on_circuit_closed
        self.on_probe_due = on_probe_due
        self._nudged: dict[str, float] = {}
        self._usage: dict[str, tuple[float, int, int]] = {}
        self._alerted: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    # -- circuits --------------------------------------------------------------------------------

    def breaker(self, target: SpoolTarget) -> CircuitBreaker:
        return CircuitBreaker(
            self.kv, target.downstream, CircuitConfig.from_spec(target.spool.circuit), clock=self.clock
        )

    def holder(self) -> str:
        return f"{self.instance}:{uuid.uuid4().hex[:16]}"

    def gate(self, target: SpoolTarget, *, lane: str | None = None) -> Gate:
        """Dispatch, probe or spool this message? :class:`CircuitOpen` when the mode stops acking.

        ``lane`` (the message's spool lane, when the caller knows it): with the circuit closed and a
        backlog still draining, a message whose lane holds nothing goes straight through - nothing of
        its lane waits, so it overtakes nothing (every item listed is replayed before it is deleted).
        """
        spool = target.spool
        breaker = self.breaker(target)
        # The circuit and the backlog mark in one read (one Firestore call per delivery, not two).
        backlog_key = BACKLOG_PREFIX + target.subscription
        read = self.kv.get_many([breaker.key, backlog_key, *(circuit_key(d) for d in target.downstreams)])
        state, backlog = CircuitState.from_entry(read[breaker.key]), read[backlog_key] is not None
        holder = self.holder()
        held = [(d, CircuitState.from_entry(read[circuit_key(d)])) for d in target.downstreams]
        held = [(d, s) for d, s in held if s.state != "closed"]
        if held:
            return self._downstream_open(target, holder, held)
        if state.state == "closed":
            if not may_interleave(spool.drain.on_recovery, spool.ordering) and backlog:
                if lane is not None and not self._lane_waits(target, lane):
                    return Gate("dispatch", holder, state=state)
                # A drain that ended while this traffic kept spooling left the mark: drain again now.
                self._nudge(target)
                return Gate("spool", holder, "draining", state)
            return Gate("dispatch", holder, state=state)
        if not backlog:
            decision = breaker.allow(
                holder,
                mode=spool.mode,
                source_kind=target.source_kind,
                hybrid_escalate_after_ms=spool.hybrid_escalate_after_ms,
            )
            if decision.action == "probe":
                return Gate("probe", holder, state=decision.state)
            if decision.action == "spool":
                return Gate("spool", holder, "circuit_open", decision.state)
            raise CircuitOpen(f"the circuit of {target.downstream} is open; retry later")
        # Items wait: the drainer probes with the oldest of them; this message joins the backlog.
        if probe_due(state, self.clock(), breaker.config):
            self._nudge(target)
        since = state.outage_since or state.opened_at
        action = on_downstream_failure(
            spool.mode, target.source_kind, since, self.clock(), spool.hybrid_escalate_after_ms
        )
        if action == "spool":
            return Gate("spool", holder, "circuit_open", state)
        raise CircuitOpen(f"the circuit of {target.downstream} is open; retry later")

    def _downstream_open(self, target: SpoolTarget, holder: str, held: list[tuple[str, CircuitState]]) -> Gate:
        """A declared downstream's circuit is not closed: spool (or refuse); only the drainer probes it,
        with the oldest spooled item, so ask it to once a probe is due."""
        spool, now = target.spool, self.clock()
        config = CircuitConfig.from_spec(spool.circuit)
        if any(probe_due(state, now, config) for _d, state in held):
            self._nudge(target)
        since = min((s.outage_since or s.opened_at or now) for _d, s in held)
        action = on_downstream_failure(spool.mode, target.source_kind, since, now, spool.hybrid_escalate_after_ms)
        if action == "spool":
            return Gate("spool", holder, DOWNSTREAM_OPEN, held[0][1])
        raise CircuitOpen(f"the circuit of {held[0][0]} is open; retry later")

    def _lane_waits(self, target: SpoolTarget, lane: str) -> bool:
        backend, _label = self.backends.resolve(target.spool)
        return bool(backend.list(target.subscription, lane, limit=1))

    def _nudge(self, target: SpoolTarget) -> None:
        """Ask the drainer to probe (and drain) now; once per ``probe_after_ms`` (at least 1 s) per subscription."""
        if self.on_probe_due is None:
            return
        now = self.monotonic()
        every = max(1.0, target.spool.circuit.probe_after_ms / 1000.0)
        with self._lock:
            if now < self._nudged.get(target.subscription, float("-inf")) + every:
                return
            self._nudged[target.subscription] = now
        try:
            self.on_probe_due(target)
        except Exception:  # noqa: BLE001 - best effort: the drainer's schedule probes anyway
            log.warning("drainer not asked to probe", extra={"subscription": target.subscription})

    def report(self, target: SpoolTarget, gate: Gate, ok: bool) -> None:
        """The dispatch of ``gate`` succeeded (the downstream answered) or failed (it is unavailable)."""
        breaker = self.breaker(target)
        if ok:
            if gate.action == "dispatch" and gate.state is not None and gate.state.consecutive_failures == 0:
                return  # a closed circuit with no failures: nothing to reset
            transition = breaker.record_success(gate.holder)
            if transition.closed:
                since = gate.state.outage_since if gate.state else None
                self.circuit_closed(target, since)
            return
        transition = breaker.record_failure(gate.holder)
        if transition.opened:
            self.circuit_opened(target, transition.state)

    def circuit_opened(self, target: SpoolTarget, state: CircuitState) -> None:
        opened_at = state.opened_at or self.clock()
        log.warning("circuit opened", extra={"downstream": target.downstream, "subscription": target.subscription})
        telemetry.gauge("circuit_open", 1, subscription=target.subscription)
        event = ev.circuit_opened(target.downstream, target.subscription, opened_at, state.consecutive_failures)
        self._emit(target.subscription, [event])

    def circuit_closed(self, target: SpoolTarget, outage_since: datetime | None) -> None:
        log.info("circuit closed", extra={"downstream": target.downstream, "subscription": target.subscription})
        telemetry.gauge("circuit_open", 0, subscription=target.subscription)
        self._emit(
            target.subscription, [ev.circuit_closed(target.downstream, target.subscription, outage_since, self.clock())]
        )
        if self.on_circuit_closed is not None:
            self.on_circuit_closed(target)

    def _emit(self, journal: str, events: list[ev.SpoolEvent]) -> None:
        """Record or park; an event that can be neither is logged, never turned into a failed delivery."""
        try:
            self.journal.emit(journal, events)
        except Unavailable:
            log.error("spool events neither recorded nor parked", extra={"types": [e.event_type for e in events]})

    # -- backlog and halt marks ------------------------------------------------------------------

    def backlog(self, subscription: str) -> bool:
        return self.kv.get(BACKLOG_PREFIX + subscription) is not None

    def mark_backlog(self, subscription: str) -> None:
        key = BACKLOG_PREFIX + subscription
        if self.kv.get(key) is None:
            self.kv.create(key, {"since": self.clock().isoformat(), "by": self.instance})

    def clear_backlog(self, subscription: str, backend: SpoolBackend) -> bool:
        """Remove the backlog mark if the spool is empty; ``False`` (mark kept) when an item is there."""
        key = BACKLOG_PREFIX + subscription
        if backend.list(subscription, limit=1):
            return False
        entry = self.kv.get(key)
        if entry is not None:
            self.kv.delete(key, expected_version=entry.version)
        if backend.list(subscription, limit=1):  # spooled while the mark went: put it back
            self.mark_backlog(subscription)
            return False
        telemetry.gauge("spool_bytes", 0, subscription=subscription)
        telemetry.gauge("spool_items", 0, subscription=subscription)
        return True

    def halted(self, subscription: str) -> dict[str, Any] | None:
        entry = self.kv.get(HALT_PREFIX + subscription)
        return None if entry is None else entry.value

    def halt(self, subscription: str, reason: dict[str, Any]) -> None:
        self.kv.create(HALT_PREFIX + subscription, reason)

    def resume(self, subscription: str) -> bool:
        return self.kv.delete(HALT_PREFIX + subscription)

    # -- spooling --------------------------------------------------------------------------------

    def usage(self, subscription: str, backend: SpoolBackend) -> tuple[int, int]:
        """``(items, bytes)`` of the live spool, listed at most every ``usage_ttl_s`` plus this process's writes."""
        now = self.monotonic()
        with self._lock:
            cached = self._usage.get(subscription)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        count, size = backend.usage(subscription)
        telemetry.gauge("spool_bytes", size, subscription=subscription)
        telemetry.gauge("spool_items", count, subscription=subscription)
        with self._lock:
            self._usage[subscription] = (now + self.usage_ttl_s, count, size)
        return count, size

    def _count(self, subscription: str, size: int) -> None:
        with self._lock:
            cached = self._usage.get(subscription)
            if cached is not None:
                self._usage[subscription] = (cached[0], cached[1] + 1, cached[2] + size)

    @telemetry.traced("spool.write")
    def spool(
        self,
        target: SpoolTarget,
        payload: bytes,
        *,
        message_id: str,
        source: str,
        plan: dict[str, Any],
        reason: str,
        idempotency_key: str | None = None,
        ordering_key: object = None,
    ) -> Spooled:
        """Keep one message durably; :class:`SpoolFull` when retention refuses it (``stop_acking``)."""
        spool = target.spool
        backend, label = self.backends.resolve(spool)
        now = self.clock()
        item = SpoolItem.for_payload(
            payload,
            subscription=target.subscription,
            lane=lane_of(spool.ordering, ordering_key),
            source=source,
            message_id=message_id,
            idempotency_key=idempotency_key,
            recv_seq=self.ids(),
            ordering_key=None if ordering_key in (None, "") else str(ordering_key),
            spooled_at=now,
            reason=reason,
            plan=plan,
        )
        count, used = self.usage(target.subscription, backend)
        verdict = retention_decision(count, used, len(payload), None, now, spool.retention)
        if isinstance(verdict, Full):
            if verdict.action == "stop_acking":
                raise SpoolFull(f"the spool of {target.subscription} is full; retry later")
            if verdict.action == "drop_to_dlq":
                ref = backend.put_dead(item, payload, SPOOL_FULL)
                event = ev.dropped(item, ref.name, SPOOL_FULL, bytes_used=used, max_bytes=verdict.max_bytes)
                self._emit(target.subscription, [event])
                return Spooled("dropped", ref, item)
            self._alert(target.subscription, SPOOL_FULL, bytes_used=used, max_bytes=verdict.max_bytes, items=count)
        try:
            ref = backend.put(item, payload)
        except SpoolItemExists as exc:  # a recv_seq is never reused; a retried put found its own write
            ref = SpoolRef(exc.name, None, len(payload))
        self._count(target.subscription, ref.size)
        if reason != FORWARD_FAILED or self.breaker(target).state().state != "closed":
            self.mark_backlog(target.subscription)
        # The item is the durable record of this event: not parked, the drainer writes it if this fails.
        self.journal.try_record([ev.spooled(item, ref.name, label)])
        return Spooled("spooled", ref, item)

    def _alert(self, subscription: str, reason: str, **details: Any) -> None:
        window = self.clock().strftime("%Y-%m-%dT%H:%M")
        with self._lock:
            if self._alerted.get((subscription, reason)) == window:
                return
            self._alerted[(subscription, reason)] = window
        log.warning("spool alert", extra={"subscription": subscription, "reason": reason})
        self._emit(subscription, [ev.alert(subscription, reason, window, **details)])
