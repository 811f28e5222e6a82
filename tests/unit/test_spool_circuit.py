"""The downstream circuit breaker (RFC §8.1): pure transitions, and the breaker on the in-memory KV."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.kv.port import Entry, VersionConflict
from noetl_cloud.spec.spool import Circuit
from noetl_cloud.spool.circuit import (
    CircuitBreaker,
    CircuitConfig,
    CircuitContended,
    CircuitState,
    decide,
    on_failure,
    on_success,
)
from tests.contracts.kv import FakeClock, run_threads

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
CONFIG = CircuitConfig(trip_after=3, probe_after_ms=30_000, probe_timeout_ms=60_000)
DOWNSTREAM = "execute:https://api.example.test"


def _open(at: datetime = NOW, failures: int = 3) -> CircuitState:
    return CircuitState(state="open", consecutive_failures=failures, opened_at=at, outage_since=at, version=4)


def _half_open(holder: str = "probe-1", started: datetime = NOW) -> CircuitState:
    return CircuitState(
        state="half_open",
        consecutive_failures=3,
        opened_at=started - timedelta(seconds=30),
        outage_since=started - timedelta(seconds=30),
        probe_holder=holder,
        probe_started_at=started,
        version=5,
    )


# -- pure transitions ------------------------------------------------------------------------------


def test_a_closed_circuit_dispatches_without_writing() -> None:
    decision = decide(CircuitState(), "a", NOW, CONFIG, mode="buffer_and_ack")
    assert decision.action == "dispatch" and decision.dispatches
    assert decision.write is None


def test_failures_below_trip_after_are_counted_and_keep_the_circuit_closed() -> None:
    transition = on_failure(CircuitState(consecutive_failures=1), "a", NOW, CONFIG)
    assert transition.write == CircuitState(consecutive_failures=2)
    assert not transition.opened


def test_trip_after_consecutive_failures_open_the_circuit() -> None:
    transition = on_failure(CircuitState(consecutive_failures=2, version=2), "a", NOW, CONFIG)
    assert transition.opened
    assert transition.write is not None
    assert transition.write.state == "open"
    assert transition.write.opened_at == NOW == transition.write.outage_since


def test_a_success_resets_the_failure_count_of_a_closed_circuit() -> None:
    assert on_success(CircuitState(consecutive_failures=2), "a").write == CircuitState()


def test_a_success_of_a_healthy_closed_circuit_writes_nothing() -> None:
    assert not on_success(CircuitState(), "a").changed


def test_an_open_circuit_spools_before_probe_after() -> None:
    later = NOW + timedelta(milliseconds=29_999)
    decision = decide(_open(), "a", later, CONFIG, mode="buffer_and_ack")
    assert decision.action == "spool" and not decision.dispatches
    assert decision.write is None


def test_an_open_circuit_refuses_under_mode_off() -> None:
    assert decide(_open(), "a", NOW, CONFIG, mode="off").action == "refuse"


def test_an_open_circuit_under_hybrid_refuses_then_spools_after_the_escalation_time() -> None:
    early = decide(_open(), "a", NOW + timedelta(seconds=10), CONFIG, mode="hybrid", hybrid_escalate_after_ms=20_000)
    late = decide(_open(), "a", NOW + timedelta(seconds=20), CONFIG, mode="hybrid", hybrid_escalate_after_ms=20_000)
    assert (early.action, late.action) == ("refuse", "spool")


def test_an_open_circuit_spools_push_sources_under_hybrid_at_once() -> None:
    decision = decide(_open(), "a", NOW, CONFIG, mode="hybrid", source_kind="push", hybrid_escalate_after_ms=10**6)
    assert decision.action == "spool"


def test_past_probe_after_the_caller_becomes_the_probe() -> None:
    later = NOW + timedelta(milliseconds=30_000)
    decision = decide(_open(), "a", later, CONFIG, mode="off")
    assert decision.action == "probe" and decision.dispatches
    assert decision.write is not None
    assert (decision.write.state, decision.write.probe_holder, decision.write.probe_started_at) == (
        "half_open",
        "a",
        later,
    )


def test_while_a_probe_runs_other_callers_are_held() -> None:
    decision = decide(_half_open("a"), "b", NOW + timedelta(seconds=1), CONFIG, mode="buffer_and_ack")
    assert decision.action == "spool"
    assert decision.write is None


def test_the_probe_holder_asking_again_keeps_its_turn() -> None:
    decision = decide(_half_open("a"), "a", NOW + timedelta(seconds=1), CONFIG, mode="buffer_and_ack")
    assert decision.action == "probe"
    assert decision.write is None


def test_a_probe_that_never_reports_expires_and_the_next_caller_takes_over() -> None:
    decision = decide(_half_open("a"), "b", NOW + timedelta(milliseconds=60_000), CONFIG, mode="buffer_and_ack")
    assert decision.action == "probe"
    assert decision.write is not None and decision.write.probe_holder == "b"


def test_the_probes_success_closes_the_circuit() -> None:
    transition = on_success(_half_open("a"), "a")
    assert transition.closed
    assert transition.write == CircuitState(version=5)


def test_the_probes_failure_reopens_with_a_fresh_timer_and_keeps_the_outage_start() -> None:
    state = _half_open("a")
    later = NOW + timedelta(seconds=5)
    transition = on_failure(state, "a", later, CONFIG)
    assert transition.reopened and not transition.opened
    assert transition.write is not None
    assert transition.write.state == "open"
    assert transition.write.opened_at == later
    assert transition.write.outage_since == state.outage_since
    assert transition.write.probe_holder is None


def test_reports_of_callers_that_are_not_the_probe_change_nothing() -> None:
    assert not on_success(_half_open("a"), "b").changed
    assert not on_failure(_half_open("a"), "b", NOW, CONFIG).changed


def test_stragglers_of_an_open_circuit_neither_close_it_nor_restart_its_timer() -> None:
    assert not on_success(_open(), "a").changed
    assert not on_failure(_open(), "a", NOW + timedelta(seconds=10), CONFIG).changed


def test_state_round_trips_through_its_stored_value() -> None:
    state = _half_open("a")
    entry = Entry(key="circuit/x", value=state.to_value(), version=5, expires_at=None)
    assert CircuitState.from_entry(entry) == state
    assert CircuitState.from_entry(None) == CircuitState()


def test_a_corrupt_stored_state_is_refused() -> None:
    with pytest.raises(ValueError):
        CircuitState.from_entry(Entry(key="k", value={"state": "ajar"}, version=1, expires_at=None))


def test_config_comes_from_the_spool_circuit_block() -> None:
    config = CircuitConfig.from_spec(Circuit(trip_after=2, probe_after_ms=500), probe_timeout_ms=9_000)
    assert config == CircuitConfig(trip_after=2, probe_after_ms=500, probe_timeout_ms=9_000)


def test_config_refuses_a_zero_trip_after() -> None:
    with pytest.raises(ValueError):
        CircuitConfig(trip_after=0)


# -- the breaker on the in-memory KV ---------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def store(clock: FakeClock) -> InMemoryKeyValueStore:
    return InMemoryKeyValueStore(clock=clock)


def _breaker(store: InMemoryKeyValueStore, clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock)


def _trip(breaker: CircuitBreaker) -> None:
    for i in range(CONFIG.trip_after):
        breaker.record_failure(f"w{i}")


def test_breaker_stores_its_state_under_circuit_slash_downstream(
    store: InMemoryKeyValueStore, clock: FakeClock
) -> None:
    breaker = _breaker(store, clock)
    breaker.record_failure("a")
    entry = store.get(f"circuit/{DOWNSTREAM}")
    assert entry is not None and entry.value["consecutive_failures"] == 1


def test_breaker_goes_through_the_whole_cycle(store: InMemoryKeyValueStore, clock: FakeClock) -> None:
    breaker = _breaker(store, clock)
    assert breaker.allow("a", mode="buffer_and_ack").action == "dispatch"
    results = [breaker.record_failure(f"w{i}") for i in range(3)]
    assert [r.opened for r in results] == [False, False, True]
    assert results[-1].state.state == "open"
    assert breaker.allow("a", mode="buffer_and_ack").action == "spool"
    clock.advance(30)
    probe = breaker.allow("p", mode="buffer_and_ack")
    assert probe.action == "probe" and probe.state.state == "half_open"
    assert breaker.allow("q", mode="buffer_and_ack").action == "spool"
    closed = breaker.record_success("p")
    assert closed.closed and closed.state.state == "closed"
    assert breaker.allow("a", mode="buffer_and_ack").action == "dispatch"


def test_breaker_reopens_on_a_failed_probe_and_waits_a_fresh_probe_after(
    store: InMemoryKeyValueStore, clock: FakeClock
) -> None:
    breaker = _breaker(store, clock)
    _trip(breaker)
    clock.advance(30)
    assert breaker.allow("p", mode="buffer_and_ack").action == "probe"
    clock.advance(2)
    assert breaker.record_failure("p").reopened
    clock.advance(29)
    assert breaker.allow("p2", mode="buffer_and_ack").action == "spool"
    clock.advance(1)
    assert breaker.allow("p2", mode="buffer_and_ack").action == "probe"


def test_breaker_lets_a_new_probe_through_when_the_probe_never_reports(
    store: InMemoryKeyValueStore, clock: FakeClock
) -> None:
    breaker = _breaker(store, clock)
    _trip(breaker)
    clock.advance(30)
    assert breaker.allow("lost", mode="buffer_and_ack").action == "probe"
    clock.advance(59)
    assert breaker.allow("b", mode="buffer_and_ack").action == "spool"
    clock.advance(1)
    assert breaker.allow("b", mode="buffer_and_ack").action == "probe"
    assert not breaker.record_success("lost").closed  # the lost probe lost its turn
    assert breaker.record_success("b").closed


def test_state_survives_a_new_breaker_instance(store: InMemoryKeyValueStore, clock: FakeClock) -> None:
    _trip(_breaker(store, clock))
    restarted = _breaker(store, clock)
    assert restarted.state().state == "open"
    assert restarted.allow("a", mode="buffer_and_ack").action == "spool"


def test_breaker_retries_after_a_version_conflict(store: InMemoryKeyValueStore, clock: FakeClock) -> None:
    class Interfering(InMemoryKeyValueStore):
        interfered = False

        def compare_and_set(self, key, value, *, expected_version, ttl_s=None):  # type: ignore[no-untyped-def]
            if not self.interfered:
                self.interfered = True
                super().compare_and_set(key, {"state": "closed", "consecutive_failures": 1}, expected_version=None)
            return super().compare_and_set(key, value, expected_version=expected_version, ttl_s=ttl_s)

    racy = Interfering(clock=clock)
    transition = CircuitBreaker(racy, DOWNSTREAM, CONFIG, clock=clock).record_failure("a")
    assert transition.state.consecutive_failures == 2  # read again and counted on top of the other write
    assert transition.state.version == 2


def test_breaker_gives_up_as_unavailable_when_always_contended(clock: FakeClock) -> None:
    class AlwaysConflicting(InMemoryKeyValueStore):
        def compare_and_set(self, key, value, *, expected_version, ttl_s=None):  # type: ignore[no-untyped-def]
            raise VersionConflict(key, expected_version, 99)

    breaker = CircuitBreaker(AlwaysConflicting(clock=clock), DOWNSTREAM, CONFIG, clock=clock, max_attempts=3)
    with pytest.raises(CircuitContended) as caught:
        breaker.record_failure("a")
    assert caught.value.retryable and caught.value.status == 503


def test_an_empty_holder_or_downstream_is_refused(store: InMemoryKeyValueStore, clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        _breaker(store, clock).allow("", mode="off")
    with pytest.raises(ValueError):
        CircuitBreaker(store, "", CONFIG, clock=clock)


def test_eight_threads_on_an_open_circuit_past_its_probe_time_get_exactly_one_probe(
    store: InMemoryKeyValueStore, clock: FakeClock
) -> None:
    _trip(_breaker(store, clock))
    clock.advance(30)
    breakers = [_breaker(store, clock) for _ in range(8)]  # one per instance
    actions = run_threads(8, lambda i: breakers[i].allow(f"instance-{i}", mode="buffer_and_ack").action)
    assert sorted(actions) == ["probe"] + ["spool"] * 7
    assert _breaker(store, clock).state().probe_holder == f"instance-{actions.index('probe')}"


def test_eight_threads_recording_failures_open_the_circuit_exactly_once(
    store: InMemoryKeyValueStore, clock: FakeClock
) -> None:
    breakers = [_breaker(store, clock) for _ in range(8)]
    transitions = run_threads(8, lambda i: breakers[i].record_failure(f"instance-{i}"))
    assert sum(t.opened for t in transitions) == 1
    state = _breaker(store, clock).state()
    assert state.state == "open"
    assert state.consecutive_failures == CONFIG.trip_after  # failures after it opened are stragglers
