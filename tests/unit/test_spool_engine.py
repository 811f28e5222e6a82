"""The spool engine with memory adapters: gating, circuits and their events, spooling, retention."""

from __future__ import annotations

import pytest

from noetl_cloud.spool import events as ev
from noetl_cloud.spool.engine import CircuitOpen, SpoolFull
from noetl_cloud.spool.policy import GLOBAL_LANE
from tests.unit.spool_support import SUB, workload_of, world


def test_a_closed_circuit_dispatches_and_trip_after_failures_open_it_with_one_event() -> None:
    w = world()
    target = w.target()
    first = w.engine.gate(target)
    assert first.action == "dispatch"
    w.engine.report(target, first, ok=False)
    assert w.engine.gate(target).action == "dispatch" and w.sink.events == []
    second = w.engine.gate(target)
    w.engine.report(target, second, ok=False)
    assert w.types() == [ev.CIRCUIT_OPENED]
    opened = w.sink.events[0]
    assert opened.payload["downstream"] == target.downstream and opened.payload["consecutive_failures"] == 2
    w.spool(target, 1)  # a backlog: the drainer probes, the ingress spools
    gate = w.engine.gate(target)
    assert (gate.action, gate.reason) == ("spool", "circuit_open")


def test_a_spooled_message_is_one_item_with_its_plan_lane_and_a_spooled_event_at_its_spool_time() -> None:
    w = world()
    target = w.target()
    done = w.spool(target, 7, key="dev-1", reason="forward_failed")
    assert done.status == "spooled"
    item, payload = w.backend.get(done.ref)
    assert workload_of(payload) == {"n": 7, "key": "dev-1"}
    assert (item.subscription, item.lane, item.ordering_key, item.reason) == (SUB, "k-dev-1", "dev-1", "forward_failed")
    assert item.plan["request"]["path"] == "domain/handle" and item.spooled_at == w.clock.now
    (event,) = w.sink.events
    assert event.event_type == ev.SPOOLED and event.event_time == item.spooled_at
    assert event.payload["spool_ref"] == "noetl://spool/" + done.ref.name
    assert event.payload["sha256"] == item.sha256 and event.payload["recv_seq"] == str(item.recv_seq)
    assert not w.engine.backlog(SUB)  # one failed forward of a closed circuit does not pause live traffic
    w.spool(target, 8, key="dev-1", reason="circuit_open")
    assert w.engine.backlog(SUB)


def test_global_ordering_puts_every_message_in_one_lane() -> None:
    w = world()
    target = w.target(ordering="global", ordering_key=None)
    for n, key in enumerate(["a", "b", None]):
        w.spool(target, n, key=key)
    assert w.backend.lanes(SUB) == [GLOBAL_LANE]


def test_ordered_then_live_spools_live_messages_while_a_backlog_drains_and_interleave_does_not() -> None:
    w = world()
    ordered, interleaved = w.target(), w.target(drain={"on_recovery": "interleave"})
    assert w.engine.gate(ordered).action == "dispatch"
    w.spool(ordered, 1)
    gate = w.engine.gate(ordered)
    assert (gate.action, gate.reason) == ("spool", "draining")
    assert w.engine.gate(interleaved).action == "dispatch"


def test_an_open_circuit_without_backlog_lets_one_live_message_probe_after_probe_after_ms() -> None:
    w = world()
    target = w.target()
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    assert w.engine.gate(target).action == "spool"
    w.clock.advance(1.0)
    probe = w.engine.gate(target)
    assert probe.action == "probe"
    assert w.engine.gate(target).action == "spool"  # only one probe
    w.engine.report(target, probe, ok=True)
    assert w.types() == [ev.CIRCUIT_OPENED, ev.CIRCUIT_CLOSED] and w.closed == [SUB]
    assert w.sink.events[1].payload["outage_since"] == w.sink.events[0].payload["opened_at"]
    assert w.engine.gate(target).action == "dispatch"


def test_hybrid_push_spools_at_once_and_hybrid_pull_stops_acking_until_it_escalates() -> None:
    w = world()
    push = w.target(mode="hybrid", hybrid_escalate_after_ms=60_000)
    pull = push.__class__(push.subscription + "-pull", push.spool, "pull", "execute:other")
    for target in (push, pull):
        for _ in range(2):
            w.engine.report(target, w.engine.gate(target), ok=False)
    assert w.engine.gate(push).action == "spool"
    with pytest.raises(CircuitOpen) as refused:
        w.engine.gate(pull)
    assert refused.value.status == 503 and refused.value.code == "circuit_open"
    w.spool(pull, 0)  # items wait (so the drainer, not a live message, probes)
    w.clock.advance(30.0)
    with pytest.raises(CircuitOpen):
        w.engine.gate(pull)
    w.clock.advance(30.0)
    gate = w.engine.gate(pull)
    assert (gate.action, gate.reason) == ("spool", "circuit_open")


def test_mode_off_with_an_open_circuit_refuses_with_503() -> None:
    w = world()
    target = w.target(mode="off")
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    with pytest.raises(CircuitOpen):
        w.engine.gate(target)


def test_retention_stop_acking_refuses_when_max_bytes_is_reached() -> None:
    w = world()
    target = w.target(retention={"max_bytes": 300, "on_full": "stop_acking"})
    w.spool(target, 1)
    with pytest.raises(SpoolFull) as full:
        for n in range(2, 10):
            w.spool(target, n)
    assert full.value.status == 503 and full.value.code == "spool_full"
    assert w.backend.usage(SUB, dlq=True) == (0, 0)


def test_retention_drop_to_dlq_writes_the_message_under_the_dead_letter_prefix_with_a_dropped_event() -> None:
    w = world()
    target = w.target(retention={"max_bytes": 300, "on_full": "drop_to_dlq"})
    results = [w.spool(target, n).status for n in range(6)]
    assert results[0] == "spooled" and results[-1] == "dropped"
    dropped = w.sink.of_type(ev.DROPPED)
    assert len(dropped) == results.count("dropped") and dropped[0].payload["reason"] == "spool_full"
    dead = w.backend.list(SUB, dlq=True)
    assert len(dead) == results.count("dropped") and w.backend.get(dead[0])[0].dlq_reason == "spool_full"


def test_retention_alert_only_spools_anyway_and_alerts_once_a_minute() -> None:
    w = world()
    target = w.target(retention={"max_bytes": 300, "on_full": "alert_only"})
    assert {w.spool(target, n).status for n in range(8)} == {"spooled"}
    assert w.backend.usage(SUB)[0] == 8
    assert len(w.sink.of_type(ev.ALERT)) == 1
    w.clock.advance(61)
    w.spool(target, 9)
    alerts = w.sink.of_type(ev.ALERT)
    assert len(alerts) == 2 and alerts[0].payload["reason"] == "spool_full"


def test_with_the_control_plane_down_circuit_events_are_parked_and_flushed_once_with_their_times() -> None:
    w = world()
    target = w.target()
    w.sink.down = True
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    spooled = w.spool(target, 1)
    parked = w.journal.parked(SUB)
    assert [e.event_type for e in parked] == [ev.CIRCUIT_OPENED]  # the item itself records its spooling
    opened_at = parked[0].event_time
    w.clock.advance(3600)
    w.sink.down = False
    assert w.journal.flush(SUB) == 1 and w.journal.flush(SUB) == 0
    w.journal.emit(SUB, parked)  # a second flush of the same events records nothing new
    assert w.types() == [ev.CIRCUIT_OPENED] and w.sink.events[0].event_time == opened_at
    assert spooled.status == "spooled"


def test_the_event_sink_is_not_retried_on_every_spool_during_an_outage() -> None:
    w = world()
    target = w.target()
    calls = []
    record = w.sink.record

    def counting(events: list[ev.SpoolEvent]) -> int:
        calls.append(len(events))
        return record(events)

    w.sink.record = counting  # type: ignore[method-assign]
    w.sink.down = True
    for n in range(5):
        w.spool(target, n)
    assert len(calls) == 1  # backed off after the first failure


def test_a_message_spooled_behind_a_backlog_asks_the_drainer_to_probe_once_the_probe_is_due() -> None:
    """Recovery under traffic waits for no schedule: the spooling ingress nudges the drainer, once per
    ``probe_after_ms``; before the probe is due, and with a closed circuit, it does not."""
    w = world()
    nudged: list[str] = []
    w.engine.on_probe_due = lambda target: nudged.append(target.subscription)
    target = w.target()  # probe_after_ms: 1000
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    w.spool(target, 1)  # the backlog: from now on the drainer probes
    assert w.engine.gate(target).action == "spool" and nudged == []  # the probe is not due yet
    w.clock.advance(1.0)
    assert w.engine.gate(target).action == "spool" and nudged == [SUB]
    w.clock.advance(0.5)
    assert w.engine.gate(target).action == "spool" and nudged == [SUB]  # once per probe_after_ms
    w.clock.advance(0.5)
    w.engine.gate(target)
    assert nudged == [SUB, SUB]


def test_a_nudge_that_fails_does_not_fail_the_delivery() -> None:
    w = world()

    def broken(target: object) -> None:
        raise RuntimeError("drainer unreachable")

    w.engine.on_probe_due = broken
    target = w.target()
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    w.spool(target, 1)
    w.clock.advance(2.0)
    assert w.engine.gate(target).action == "spool"


def test_live_traffic_behind_the_backlog_of_a_closed_circuit_asks_for_a_drain_again() -> None:
    """A drain that ended while live messages kept being spooled leaves the backlog mark: the next
    message spooled behind it asks the drainer again, so live traffic is not spooled until the schedule."""
    w = world()
    nudged: list[str] = []
    w.engine.on_probe_due = lambda target: nudged.append(target.subscription)
    target = w.target()
    w.spool(target, 1)  # the mark, with the circuit closed
    gate = w.engine.gate(target)
    assert (gate.action, gate.reason) == ("spool", "draining") and nudged == [SUB]


def test_behind_a_draining_backlog_a_message_whose_lane_is_empty_goes_straight_through() -> None:
    """ordered_then_live per lane: once a lane is drained its live messages overtake nothing."""
    w = world()
    target = w.target()  # per_key
    w.spool(target, 1, key="dev-1")  # the mark; lane k-dev-1 waits
    waiting = w.engine.gate(target, lane="k-dev-1")
    assert (waiting.action, waiting.reason) == ("spool", "draining")
    assert w.engine.gate(target, lane="k-dev-2").action == "dispatch"
    assert w.engine.gate(target).reason == "draining"  # a caller that does not know the lane waits for all
