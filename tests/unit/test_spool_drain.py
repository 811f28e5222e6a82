"""The drainer with memory adapters: probe, per-lane order, crash safety, poison, retention, leases, rate."""

from __future__ import annotations

import pytest

from noetl_cloud.spool import events as ev
from noetl_cloud.spool.drain import DEAD_LETTERED_LOG
from noetl_cloud.spool.drain_lanes import lease_name
from noetl_cloud.spool.policy import GLOBAL_LANE
from noetl_cloud.spool.replayer import replay_request
from tests.unit.spool_support import SUB, World, world


def outage(w: World, **spool: object) -> tuple[World, object]:
    """The circuit opened by two failed forwards; 9 messages spooled over 3 keys."""
    target = w.target(**spool)
    for _ in range(2):
        w.engine.report(target, w.engine.gate(target), ok=False)
    for n in range(9):
        w.spool(target, n, key="abc"[n % 3])
    return w, target


def test_nothing_is_replayed_before_probe_after_ms_and_a_failed_probe_reopens_the_circuit() -> None:
    w, target = outage(world())
    drainer = w.drainer()
    report = drainer.drain(target)  # type: ignore[arg-type]
    assert (report.state, w.control.calls) == ("circuit_open", 0)
    w.clock.advance(1.0)
    w.control.down = True
    report = drainer.drain(target)  # type: ignore[arg-type]
    assert (report.state, report.probed, w.control.calls) == ("circuit_open", True, 1)
    assert w.engine.breaker(target).state().state == "open"  # type: ignore[arg-type]
    assert w.backend.usage(SUB)[0] == 9


def test_a_successful_probe_closes_the_circuit_and_the_backlog_drains_per_lane_in_receive_order() -> None:
    w, target = outage(world())
    w.clock.advance(1.0)
    report = w.drainer().drain(target)  # type: ignore[arg-type]
    assert (report.state, report.replayed, report.probed) == ("drained", 9, True)
    assert w.control.executions[0]["workload"]["n"] == 0  # the probe is the oldest item
    for key in "abc":
        assert w.control.order_of(key) == sorted(w.control.order_of(key)) and len(w.control.order_of(key)) == 3
    assert w.backend.usage(SUB) == (0, 0) and not w.engine.backlog(SUB)
    types = w.types()
    assert types[0] == ev.CIRCUIT_OPENED and types.count(ev.CIRCUIT_CLOSED) == 1 and types.count(ev.DRAINING) == 1
    assert types.index(ev.CIRCUIT_CLOSED) < types.index(ev.REPLAYED)
    assert types.count(ev.SPOOLED) == 9 and types.count(ev.REPLAYED) == 9 and types[-1] == ev.RECOVERED
    replayed = w.sink.of_type(ev.REPLAYED)
    assert {e.payload["execution_id"] for e in replayed} == {str(i) for i in range(1, 10)}


def test_replays_carry_the_stored_plan_and_a_dedup_block_keyed_by_the_idempotency_key_or_message_id() -> None:
    w = world()
    target = w.target()
    done = w.spool(target, 3)
    item, payload = w.backend.get(done.ref)
    request = replay_request(item, payload)
    assert request["path"] == "domain/handle" and request["workload"] == {"n": 3, "key": "a"}
    assert request["dedup"]["key"] == "m3" and request["meta"]["spool"]["recv_seq"] == str(item.recv_seq)
    keyed = item.model_copy(update={"idempotency_key": "idem-9"})
    assert replay_request(keyed, payload)["dedup"]["key"] == "idem-9"
    planned = item.model_copy(update={"plan": {**item.plan, "dedup": {"key": "k", "window_secs": 60}}})
    assert replay_request(planned, payload)["dedup"] == {"key": "k", "window_secs": 60}


def test_a_drainer_killed_after_replaying_but_before_deleting_still_runs_each_message_once() -> None:
    w = world()
    target = w.target()
    for n in range(4):
        w.spool(target, n)
    backend_delete = w.backend.delete
    deleted: list[str] = []

    def crash_on_third(ref: object) -> bool:
        if len(deleted) == 2:
            raise KeyboardInterrupt("killed")  # the process dies between the replay and the delete
        deleted.append(ref.name)  # type: ignore[attr-defined]
        return backend_delete(ref)  # type: ignore[arg-type]

    w.backend.delete = crash_on_third  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        w.drainer().drain(target)
    w.backend.delete = backend_delete  # type: ignore[method-assign]
    w.clock.advance(31)  # the dead drainer's lease expires
    report = w.drainer().drain(target)
    assert report.state == "drained" and w.backend.usage(SUB) == (0, 0)
    assert [r["workload"]["n"] for r in w.control.executions] == [0, 1, 2, 3]
    assert len(w.sink.of_type(ev.REPLAYED)) == 4 and len(w.sink.of_type(ev.SPOOLED)) == 4


def test_a_lane_leased_by_another_drainer_is_left_alone() -> None:
    w = world()
    target = w.target()
    w.spool(target, 1, key="a")
    w.spool(target, 2, key="b")
    assert w.kv.acquire_lease(lease_name(SUB, "k-a"), "other-drainer", 30)
    report = w.drainer().drain(target)
    assert report.replayed == 1 and [r["workload"]["key"] for r in w.control.executions] == ["b"]
    assert w.engine.backlog(SUB)  # lane a still waits


def test_a_poison_item_is_dead_lettered_after_max_replay_attempts_and_its_per_key_lane_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    target = w.target(drain={"max_replay_attempts": 3})
    for n in range(3):
        w.spool(target, n, key="a")
    w.control.rejects.add("m1")
    report = w.drainer().drain(target)
    assert (report.state, report.replayed, report.dead_lettered) == ("drained", 2, 1)
    assert w.control.order_of("a") == [0, 2]
    assert w.control.calls == 2 + 3  # the poison item was tried exactly max_replay_attempts times
    (dead,) = w.backend.list(SUB, dlq=True)
    item, _payload = w.backend.get(dead)
    assert (item.message_id, item.attempts, item.dlq_reason) == ("m1", 3, "max_replay_attempts")
    (event,) = w.sink.of_type(ev.DEAD_LETTERED)
    assert event.payload["reason"] == "max_replay_attempts" and event.payload["attempts"] == 3
    # The one log line the dead-letter alert policy matches (infra/modules/monitoring).
    (line,) = [r for r in caplog.records if r.getMessage() == DEAD_LETTERED_LOG]
    assert (line.levelname, line.subscription, line.reason) == ("WARNING", SUB, "max_replay_attempts")  # type: ignore[attr-defined]


def test_a_poison_item_under_global_ordering_halts_the_drain_until_an_operator_resumes() -> None:
    w = world()
    target = w.target(ordering="global", ordering_key=None, drain={"max_replay_attempts": 2})
    for n in range(3):
        w.spool(target, n, key=None)
    w.control.rejects.add("m1")
    report = w.drainer().drain(target)
    assert (report.state, report.replayed, report.dead_lettered) == ("halted", 1, 1)
    assert [e.payload["reason"] for e in w.sink.of_type(ev.ALERT)] == ["global_lane_halted"]
    assert w.drainer().drain(target).state == "halted" and len(w.control.executions) == 1
    assert w.engine.gate(target).reason == "draining"  # live traffic keeps queueing behind the gap
    resumed = w.drainer().drain(target, resume=True)
    assert (resumed.state, resumed.replayed) == ("drained", 1)
    assert [r["workload"]["n"] for r in w.control.executions] == [0, 2]
    assert w.backend.lanes(SUB, dlq=True) == [GLOBAL_LANE]


def test_items_older_than_max_age_hours_leave_with_retention_expired_even_while_the_circuit_is_open() -> None:
    circuit = {"trip_after": 2, "probe_after_ms": 86_400_000}
    w, target = outage(world(), retention={"max_age_hours": 1}, circuit=circuit)
    w.clock.advance(3601)
    late = w.spool(target, 100, key="a")  # type: ignore[arg-type]
    report = w.drainer().drain(target)  # type: ignore[arg-type]
    assert (report.state, report.dead_lettered, w.control.calls) == ("circuit_open", 9, 0)
    dead = w.sink.of_type(ev.DEAD_LETTERED)
    assert len(dead) == 9 and {e.payload["reason"] for e in dead} == {"retention_expired"}
    assert w.backend.list(SUB) == [late.ref] and w.backend.usage(SUB, dlq=True)[0] == 9
    assert len(w.sink.of_type(ev.SPOOLED)) == 10  # every spooling is on record, the expired ones' too


def test_drain_rate_per_sec_paces_the_replays() -> None:
    w = world()
    target = w.target(drain={"rate_per_sec": 4})
    for n in range(9):
        w.spool(target, n)
    w.drainer().drain(target)
    assert len(w.control.executions) == 9
    assert sum(w.clock.slept) == pytest.approx(8 / 4)


def test_an_empty_spool_clears_the_backlog_mark_and_reports_empty() -> None:
    w = world()
    target = w.target()
    w.engine.mark_backlog(SUB)
    assert w.drainer().drain(target).state == "empty"
    assert not w.engine.backlog(SUB)


def test_events_parked_during_the_outage_are_flushed_by_the_drainer() -> None:
    w = world()
    w.sink.down = True
    w, target = outage(w)
    assert [e.event_type for e in w.journal.parked(SUB)] == [ev.CIRCUIT_OPENED]
    w.sink.down = False
    w.clock.advance(10)
    w.drainer().drain(target)  # type: ignore[arg-type]
    assert w.journal.parked(SUB) == []
    assert w.types().count(ev.CIRCUIT_OPENED) == 1 and w.types().count(ev.SPOOLED) == 9
    spooled_times = sorted(e.event_time for e in w.sink.of_type(ev.SPOOLED))
    assert spooled_times[-1] < w.clock.now  # written late, with the original spool times


def test_items_spooled_behind_the_backlog_during_a_drain_are_drained_in_the_same_run() -> None:
    """Live traffic keeps arriving while the backlog drains (ordered_then_live spools it): the run drains
    those too, in another pass, and removes the mark, so live traffic flows without another trigger."""
    w = world()
    target = w.target()
    for n in range(3):
        w.spool(target, n, key="a")
    replay = w.control.replay
    arrived: list[int] = []

    def replay_while_traffic_arrives(item, payload):  # type: ignore[no-untyped-def]
        if len(arrived) < 2:  # two live messages arrive behind the backlog during the drain
            n = 10 + len(arrived)
            arrived.append(n)
            assert w.engine.gate(target).reason == "draining"
            w.spool(target, n, key="a", reason="draining")
        return replay(item, payload)

    w.control.replay = replay_while_traffic_arrives  # type: ignore[method-assign]
    report = w.drainer().drain(target)
    assert (report.state, report.replayed) == ("drained", 5)
    assert w.control.order_of("a") == [0, 1, 2, 10, 11]
    assert w.backend.list(SUB) == [] and not w.engine.backlog(SUB)
    assert w.types().count(ev.RECOVERED) == 1
    assert w.engine.gate(target).action == "dispatch"
