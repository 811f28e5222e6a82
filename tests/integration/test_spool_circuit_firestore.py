"""The circuit breaker persisted in Firestore (the emulator): restarts and the one-probe rule.

Each test gets its own collection (``circuit-test-<hex>``). The emulator is slow under contention
on one document (docs/local.md), so the concurrent test stays at 4 threads.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from noetl_cloud.kv.firestore import FirestoreKeyValueStore
from noetl_cloud.spool.circuit import CircuitBreaker, CircuitConfig
from tests.contracts.kv import FakeClock, run_threads

CONFIG = CircuitConfig(trip_after=2, probe_after_ms=1_000, probe_timeout_ms=5_000)
DOWNSTREAM = "execute:https://api.example.test/v1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def store(local_env: dict[str, str], clock: FakeClock) -> Iterator[FirestoreKeyValueStore]:
    store = FirestoreKeyValueStore(
        project_id="noetl-local",
        collection=f"circuit-test-{secrets.token_hex(6)}",
        emulator_host=local_env["FIRESTORE_EMULATOR_HOST"],
        clock=clock,
    )
    yield store
    store.close()


def test_circuit_state_survives_a_new_breaker_instance(store: FirestoreKeyValueStore, clock: FakeClock) -> None:
    first = CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock)
    assert not first.record_failure("a").opened
    assert first.record_failure("b").opened

    restarted = CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock)
    assert restarted.state().state == "open"
    assert restarted.allow("c", mode="buffer_and_ack").action == "spool"
    clock.advance(1)
    assert restarted.allow("c", mode="buffer_and_ack").action == "probe"

    again = CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock)
    assert again.state().probe_holder == "c"
    closed = again.record_success("c")
    assert closed.closed and closed.state.state == "closed"
    assert CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock).allow("d", mode="off").action == "dispatch"


def test_four_instances_past_the_probe_time_get_exactly_one_probe(
    store: FirestoreKeyValueStore, clock: FakeClock
) -> None:
    setup = CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock)
    for holder in ("a", "b"):
        setup.record_failure(holder)
    clock.advance(1)
    breakers = [CircuitBreaker(store, DOWNSTREAM, CONFIG, clock=clock) for _ in range(4)]
    actions = run_threads(4, lambda i: breakers[i].allow(f"instance-{i}", mode="buffer_and_ack").action)
    assert sorted(actions) == ["probe", "spool", "spool", "spool"]
    assert setup.state().probe_holder == f"instance-{actions.index('probe')}"
