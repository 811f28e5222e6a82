"""Draining a subscription's spool (RFC §8.3): probe, lease, replay in order, dead-letter.

One :meth:`Drainer.drain` of one subscription:

1. flushes the events parked while the control plane was down (:class:`~noetl_cloud.spool.events.EventJournal`);
2. takes a lease per lane (``spool-drain/<subscription>/<lane>`` in the coordination store) so two
   drainers never drain one lane; under ``global`` ordering it needs every lane (the leases, the lane's
   head and the settling of replayed items: :mod:`~noetl_cloud.spool.drain_lanes`);
3. if the downstream's circuit is not closed, becomes its probe when the probe is due: the probe
   is the replay of the oldest spooled item, so a downstream with no health endpoint recovers.
   Success closes the circuit (``subscription.circuit.closed``); failure re-opens it, and the
   drain only enforces ``max_age_hours`` on the lane heads;
4. replays each lane in receive order through ``POST /api/execute`` with the stored plan and a
   dedup block (the plan's, else the idempotency key or message id), at ``drain.rate_per_sec``.
   The ``spooled`` events of a batch are written first, in one call (with the items' spool times),
   then the items are replayed one by one, then the ``replayed`` events of up to ``SETTLE_EVERY``
   replayed items in one call, then their objects are deleted (the lane lease is renewed once a
   third of its TTL has passed): a drainer killed anywhere in between
   replays the item again and the control plane's dedup window answers ``duplicate``;
5. an item the control plane refuses counts an attempt (the count is stored in the object);
   at ``max_replay_attempts`` it moves to the dead-letter prefix. Under ``per_key`` / ``none``
   its lane goes on; under ``global`` the drain halts (a ``subscription.spool.alert``) until an
   operator resumes it, accepting the gap. Items older than ``max_age_hours`` are dead-lettered
   with reason ``retention_expired``;
6. when the spool is empty, removes the backlog mark (live traffic flows again under
   ``ordered_then_live``) and writes ``subscription.spool.recovered``; items spooled behind the
   backlog meanwhile are drained in another pass of the same run first.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from noetl_cloud import telemetry
from noetl_cloud.errors import Unavailable
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.downstreams import probe_verdict, take_probes
from noetl_cloud.spool.drain_lanes import SETTLE_EVERY, LaneLeases, load_lane, settle
from noetl_cloud.spool.drain_report import DrainReport
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.item import SpoolItem, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.policy import POISON, RETENTION_EXPIRED, drain_order, expired, is_poison
from noetl_cloud.spool.port import SpoolBackend
from noetl_cloud.spool.replayer import Replayer, with_probe
from noetl_cloud.spool.target import SpoolTarget

log = logging.getLogger(__name__)
#: The log line of each item the drainer dead-letters (an alert policy of infra/modules/monitoring matches it).
DEAD_LETTERED_LOG = "spool item dead-lettered"


# -- the drain ------------------------------------------------------------------------------------


class _Stop(Exception):
    def __init__(self, state: str) -> None:
        self.state = state


class Drainer:
    """Drains subscriptions with one :class:`SpoolEngine` and one :class:`Replayer`."""

    def __init__(
        self,
        engine: SpoolEngine,
        replayer: Replayer,
        *,
        holder: str | None = None,
        lease_ttl_s: float = 30.0,
        budget_s: float = 240.0,
        batch: int = 100,
        probe_wait_s: float = 0.0,
        probe_poll_s: float = 0.25,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.replayer = replayer
        self.holder = holder or f"drainer-{uuid.uuid4().hex[:12]}"
        self.lease_ttl_s = lease_ttl_s
        self.budget_s = budget_s
        self.batch = batch
        self.probe_wait_s = probe_wait_s
        self.probe_poll_s = probe_poll_s
        self.sleep = sleep
        self.monotonic = monotonic
        self.leases = LaneLeases(engine.kv, lease_ttl_s, monotonic)

    # -- one subscription ------------------------------------------------------------------------

    @telemetry.traced("spool.drain")
    def drain(self, target: SpoolTarget, *, resume: bool = False) -> DrainReport:
        sub = target.subscription
        report = DrainReport(sub, started=self.monotonic())
        report.holder = f"{self.holder}:{report.drain_id[:12]}"  # one holder per run, even between threads
        self._flush(sub)
        backend, label = self.engine.backends.resolve(target.spool)
        if resume:
            self.engine.resume(sub)
        self._pass(target, backend, label, report)
        if report.state == "probing" and self._probe_closed(target, report):
            report.state = "drained"  # the probe's execution closed the circuit: drain the rest now
            self._pass(target, backend, label, report)
        # Live messages spooled behind the backlog while a pass ran keep the mark: drain them too, at
        # once (each pass is shorter), until a pass ends with the spool empty or the budget is spent.
        cleared = False
        while report.state == "drained":
            if self.engine.clear_backlog(sub, backend):
                cleared = True
                break
            if self.monotonic() - report.started > self.budget_s:
                report.state = "budget"
                break
            self._pass(target, backend, label, report)
            if report.state == "empty":  # the pass found nothing left and removed the mark
                report.state, cleared = "drained", True
        if cleared and (report.replayed or report.dead_lettered):
            duration_ms = int((self.monotonic() - report.started) * 1000)
            event = ev.recovered(
                sub,
                report.drain_id,
                replayed_count=report.replayed,
                dead_lettered_count=report.dead_lettered,
                duration_ms=duration_ms,
            )
            self._emit(sub, [event])
        return report

    def _pass(self, target: SpoolTarget, backend: SpoolBackend, label: str, report: DrainReport) -> None:
        """Lease the lanes there are now and drain them; ``report.state`` says how it ended."""
        sub = target.subscription
        lanes = backend.lanes(sub)
        report.lanes = report.lanes or lanes
        if not lanes:
            self.engine.clear_backlog(sub, backend)
            report.state = "empty"
            return
        leased = [lane for lane in lanes if self.leases.take(sub, lane, report.holder)]
        try:
            if not leased or (target.spool.ordering == "global" and len(leased) < len(lanes)):
                report.state = "busy"
                return
            if self.engine.halted(sub):
                self._sweep(target, backend, label, leased, report)
                report.state = "halted"
                return
            report.state = "drained"
            self._run(target, backend, label, leased, report)
        except _Stop as stop:
            report.state = stop.state
        finally:
            for lane in leased:
                self.leases.release(sub, lane, report.holder)

    def _run(
        self, target: SpoolTarget, backend: SpoolBackend, label: str, lanes: list[str], report: DrainReport
    ) -> None:
        sub, spool = target.subscription, target.spool
        breaker = self.engine.breaker(target)
        probe = None
        state = breaker.state()
        if state.state != "closed":
            decision = breaker.allow(
                report.holder,
                mode=spool.mode,
                source_kind=target.source_kind,
                hybrid_escalate_after_ms=spool.hybrid_escalate_after_ms,
            )
            if decision.action != "probe":
                self._sweep(target, backend, label, lanes, report)
                raise _Stop("circuit_open")
            probe = decision.state
            report.probed = True
        downstream_probe = self._downstream_probe(target, backend, label, lanes, report)
        count, size = backend.usage(sub)
        self._emit(
            sub,
            [
                ev.draining(
                    sub, report.drain_id, items=count, bytes_used=size, lanes=len(lanes), ordering=spool.ordering
                )
            ],
        )
        pace = 1.0 / spool.drain.rate_per_sec
        next_at = self.monotonic()
        active = list(lanes)
        while active:
            if self.monotonic() - report.started > self.budget_s:
                raise _Stop("budget")
            loaded = {lane: load_lane(backend, sub, lane, self.batch) for lane in active}
            active = [lane for lane in active if loaded[lane]]
            if not active:
                return
            plan = drain_order({lane: loaded[lane] for lane in active}, spool.ordering, spool.drain.max_replay_attempts)
            # The batch's ``spooled`` events in one call, each before its item's replay (idempotent: an
            # item not replayed in this run gets it again from the next).
            steps = list(plan.interleaved())
            self.engine.journal.emit(sub, [ev.spooled(st.item.item, st.item.ref.name, label) for st in steps])
            blocked: set[str] = set()
            pending: list[tuple[ev.SpoolEvent, SpoolRef]] = []
            try:
                for step in steps:
                    lane = step.lane
                    if lane in blocked:
                        continue
                    if not self.leases.renew(sub, lane, report.holder):  # lost it (expired): another drainer has it
                        blocked.add(lane)
                        active.remove(lane)
                        continue
                    entry = step.item
                    if expired(entry.item.spooled_at, self.engine.clock(), spool.retention.max_age_hours):
                        self._dead_letter(sub, backend, label, entry.ref, entry.item, RETENTION_EXPIRED, report)
                        continue
                    if step.action == "dead_letter":
                        self._poisoned(target, backend, label, entry.ref, entry.item, report)
                        continue
                    wait = next_at - self.monotonic()
                    if wait > 0:
                        self.sleep(wait)
                    next_at = max(next_at, self.monotonic()) + pace
                    replayed_item = entry.item
                    if downstream_probe:  # the execution reports its end under the probe's holder
                        replayed_item = with_probe(entry.item, downstream_probe)
                    result = self.replayer.replay(replayed_item, entry.payload)
                    if probe is not None:
                        if result.outcome == "unavailable":
                            breaker.record_failure(report.holder)
                            self._sweep(target, backend, label, lanes, report)
                            raise _Stop("circuit_open")
                        if breaker.record_success(report.holder).closed:
                            self.engine.circuit_closed(target, probe.outage_since or probe.opened_at)
                        probe = None
                    if result.outcome == "replayed":
                        replayed = ev.replayed(
                            entry.item,
                            entry.ref.name,
                            result.execution_id,
                            duplicate=result.duplicate,
                            attempts=entry.item.attempts + 1,
                        )
                        pending.append((replayed, entry.ref))
                        report.replayed += 1
                        if len(pending) >= SETTLE_EVERY:
                            settle(self._emit, sub, backend, pending)
                    elif result.outcome == "unavailable":
                        transition = breaker.record_failure(report.holder)
                        if transition.opened:
                            self.engine.circuit_opened(target, transition.state)
                        raise _Stop("circuit_open")
                    else:
                        blocked.add(lane)  # the lane waits on its head; it is retried from a fresh read
                        attempts = entry.item.attempts + 1
                        log.warning("spool replay refused", extra={"subscription": sub, "reason": result.detail})
                        try:
                            ref = backend.update_attempts(entry.ref, attempts)
                        except (SpoolItemNotFound, SpoolVersionConflict):
                            continue  # another drainer moved it on
                        if is_poison(attempts, spool.drain.max_replay_attempts):
                            self._poisoned(
                                target,
                                backend,
                                label,
                                ref,
                                entry.item.model_copy(update={"attempts": attempts}),
                                report,
                                detail=result.detail,
                            )
                    # One item only: the rest waits for the probe's execution to end. A duplicate (its
                    # execution exists from an earlier run: it will not report under this holder) passes
                    # the probe on to the next item.
                    if downstream_probe and not (result.outcome == "replayed" and result.duplicate):
                        raise _Stop("probing")
            finally:
                settle(self._emit, sub, backend, pending)
            if plan.halted_lanes:
                raise _Stop("halted")

    # -- helpers ---------------------------------------------------------------------------------

    def _probe_closed(self, target: SpoolTarget, report: DrainReport) -> bool:
        """Wait up to ``probe_wait_s`` (polling the store) for the probe's execution to close every downstream
        circuit: ``True`` once closed, ``False`` when one re-opened or the wait ran out (the next drain goes on)."""
        deadline = self.monotonic() + self.probe_wait_s
        config = self.engine.breaker(target).config
        while self.monotonic() < deadline and self.monotonic() - report.started < self.budget_s:
            verdict = probe_verdict(self.engine.kv, target.downstreams, config, self.engine.clock)
            if verdict != "pending":
                return verdict == "closed"
            self.sleep(self.probe_poll_s)
        return False

    def _downstream_probe(
        self, target: SpoolTarget, backend: SpoolBackend, label: str, lanes: list[str], report: DrainReport
    ) -> dict[str, str]:
        """With a declared downstream's circuit open: take its probe (``{name: holder}``) once it is due,
        else stop (``circuit_open``). Empty when every downstream circuit is closed."""
        spool = target.spool
        probes = take_probes(
            self.engine.kv,
            target.downstreams,
            self.engine.breaker(target).config,
            self.engine.clock,
            report.holder,
            mode=spool.mode,
            source_kind=target.source_kind,
            hybrid_escalate_after_ms=spool.hybrid_escalate_after_ms,
        )
        if probes is None:
            self._sweep(target, backend, label, lanes, report)
            raise _Stop("circuit_open")
        report.probed = report.probed or bool(probes)
        return probes

    def _poisoned(
        self,
        target: SpoolTarget,
        backend: SpoolBackend,
        label: str,
        ref: SpoolRef,
        item: SpoolItem,
        report: DrainReport,
        *,
        detail: str | None = None,
    ) -> None:
        sub = target.subscription
        self._dead_letter(sub, backend, label, ref, item, POISON, report, detail=detail)
        if target.spool.ordering == "global":
            self.engine.halt(sub, {"reason": POISON, "message_id": item.message_id, "recv_seq": str(item.recv_seq)})
            self._emit(
                sub,
                [
                    ev.alert(
                        sub,
                        "global_lane_halted",
                        str(item.recv_seq),
                        message_id=item.message_id,
                        recv_seq=str(item.recv_seq),
                    )
                ],
            )
            raise _Stop("halted")

    def _dead_letter(
        self,
        sub: str,
        backend: SpoolBackend,
        label: str,
        ref: SpoolRef,
        item: SpoolItem,
        reason: str,
        report: DrainReport,
        *,
        detail: str | None = None,
    ) -> None:
        self.engine.journal.emit(sub, [ev.spooled(item, ref.name, label)])
        try:
            dead = backend.move_to_dlq(ref, reason)
        except (SpoolItemNotFound, SpoolVersionConflict):
            return
        self._emit(sub, [ev.dead_lettered(item, ref.name, dead.name, reason, attempts=item.attempts, detail=detail)])
        report.dead_lettered += 1
        # What the stack's alert policy matches (infra/modules/monitoring): keep the message as it is.
        log.warning(DEAD_LETTERED_LOG, extra={"subscription": sub, "reason": reason, "attempts": item.attempts})

    def _sweep(
        self, target: SpoolTarget, backend: SpoolBackend, label: str, lanes: list[str], report: DrainReport
    ) -> None:
        """While nothing can be replayed: dead-letter the lane heads older than ``max_age_hours``."""
        max_age = target.spool.retention.max_age_hours
        for lane in lanes:
            for entry in load_lane(backend, target.subscription, lane, self.batch):
                if not expired(entry.item.spooled_at, self.engine.clock(), max_age):
                    break
                self._dead_letter(target.subscription, backend, label, entry.ref, entry.item, RETENTION_EXPIRED, report)

    def _emit(self, sub: str, events: list[ev.SpoolEvent]) -> None:
        self.engine.journal.emit(sub, events)

    def _flush(self, sub: str) -> None:
        try:
            self.engine.journal.flush(sub)
        except Unavailable:
            log.info("parked spool events not flushed yet", extra={"subscription": sub})
