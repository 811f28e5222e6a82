from __future__ import annotations

from datetime import datetime

import pytest

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from tests.contracts.kv import FakeClock, KeyValueContract, new_key


class TestInMemoryKeyValueStore(KeyValueContract):
    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, clock: FakeClock) -> InMemoryKeyValueStore:
        return InMemoryKeyValueStore(clock=clock)


def test_memory_store_drops_expired_records_when_they_are_touched() -> None:
    clock = FakeClock()
    store = InMemoryKeyValueStore(clock=clock)
    key = new_key()
    store.create(key, {}, ttl_s=1)
    store.create(new_key(), {})
    clock.advance(1)
    assert len(store) == 2
    assert store.get(key) is None
    assert len(store) == 1


def test_memory_store_refuses_a_naive_clock() -> None:
    store = InMemoryKeyValueStore(clock=datetime.now)
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create(new_key(), {})


def test_memory_store_runs_on_the_wall_clock_by_default() -> None:
    store = InMemoryKeyValueStore()
    lease = store.acquire_lease("runtime/singleton", "me", ttl_s=60)
    assert lease is not None and lease.expires_at.tzinfo is not None
