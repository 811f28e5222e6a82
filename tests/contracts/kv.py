"""The coordination key-value contract: one suite, run against every adapter.

A subclass provides the ``clock`` fixture (a :class:`FakeClock`) and the ``store`` fixture built
on it, so expiry is tested by moving the clock, never by sleeping.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from noetl_cloud.kv import Entry, KeyValueStore, Lease, ValueTooLarge, VersionConflict

T = TypeVar("T")


class FakeClock:
    """A controllable UTC clock, shared by the threads of one test."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)


def new_key(prefix: str = "test") -> str:
    return f"{prefix}/{secrets.token_hex(6)}"


def run_threads(n: int, work: Callable[[int], T]) -> list[T]:
    """Run ``work(i)`` on ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - the test thread re-raises it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish"
    if errors:
        raise errors[0]
    return results


class KeyValueContract:
    # -- get / create --------------------------------------------------------------------------

    def test_get_of_a_missing_key_is_none(self, store: KeyValueStore) -> None:
        assert isinstance(store, KeyValueStore)
        assert store.get(new_key()) is None

    def test_create_writes_version_1_and_get_reads_it_back(self, store: KeyValueStore, clock: FakeClock) -> None:
        key = new_key()
        created = store.create(key, {"state": "closed", "failures": 0}, ttl_s=30)
        assert created == Entry(key, {"state": "closed", "failures": 0}, 1, clock() + timedelta(seconds=30))
        assert store.get(key) == created
        forever = store.create(new_key(), {"x": 1})
        assert forever is not None and forever.expires_at is None and forever.version == 1

    def test_create_returns_none_while_a_live_entry_exists(self, store: KeyValueStore) -> None:
        key = new_key("ingress/seen/listener-a")
        first = store.create(key, {"n": 1}, ttl_s=60)
        assert store.create(key, {"n": 2}, ttl_s=60) is None
        assert store.get(key) == first

    def test_create_succeeds_again_once_the_entry_expired(self, store: KeyValueStore, clock: FakeClock) -> None:
        key = new_key("ingress/seen/listener-a")
        store.create(key, {"n": 1}, ttl_s=60)
        clock.advance(59.9)
        assert store.create(key, {"n": 2}, ttl_s=60) is None
        clock.advance(0.1)  # exactly at expires_at: expired
        assert store.get(key) is None
        again = store.create(key, {"n": 3}, ttl_s=60)
        assert again is not None and (again.value, again.version) == ({"n": 3}, 1)
        assert again.expires_at == clock() + timedelta(seconds=60)
        assert store.get(key) == again

    def test_get_many_reads_each_key_as_get_does(self, store: KeyValueStore, clock: FakeClock) -> None:
        live, short, missing = new_key(), new_key(), new_key()
        store.create(live, {"n": 1})
        store.create(short, {"n": 2}, ttl_s=5)
        clock.advance(5)  # ``short`` expired
        keys = [live, short, missing, f"{live}/ü"]
        store.create(keys[3], {"n": 4})
        read = store.get_many(keys)
        assert list(read) == keys and read == {key: store.get(key) for key in keys}
        assert (
            (read[live] is not None and read[live].value == {"n": 1}) and read[short] is None and read[missing] is None
        )
        assert store.get_many([]) == {}

    def test_values_round_trip_as_json_and_reads_are_copies(self, store: KeyValueStore) -> None:
        key = new_key()
        value = {"ünï": "cödé", "nested": [[1, 2], [3.5, None]], "flag": True, "n": 10**15, "m": {"": {"a/b": []}}}
        store.create(key, value)
        read = store.get(key)
        assert read is not None and read.value == value
        assert isinstance(read.value["n"], int) and isinstance(read.value["nested"][1][0], float)
        read.value["flag"] = False
        again = store.get(key)
        assert again is not None and again.value["flag"] is True

    def test_keys_of_any_shape_map_to_distinct_entries(self, store: KeyValueStore) -> None:
        base = new_key()
        keys = [f"{base}/a/b", f"{base}/a%2Fb", f"{base}/ü/ç", ".", "..", "__x__", "/", f"{base}/" + "x" * 3000]
        for i, key in enumerate(keys):
            assert store.create(key, {"i": i}) is not None
        for i, key in enumerate(keys):
            entry = store.get(key)
            assert entry is not None and (entry.key, entry.value) == (key, {"i": i})

    def test_bad_arguments_are_refused_before_anything_is_written(self, store: KeyValueStore) -> None:
        key = new_key()
        with pytest.raises(ValueError):
            store.create("", {})
        with pytest.raises(ValueError):
            store.create(key, {}, ttl_s=0)
        with pytest.raises(ValueError):
            store.create(key, {"nan": float("nan")})
        with pytest.raises(TypeError):
            store.create(key, {"when": datetime.now(UTC)})
        with pytest.raises(ValueTooLarge) as info:
            store.create(key, {"blob": "x" * (1024 * 1024)})
        assert info.value.code == "kv_value_too_large"
        with pytest.raises(ValueError):
            store.acquire_lease("lane", "me", ttl_s=-1)
        assert store.get(key) is None

    # -- compare-and-set -----------------------------------------------------------------------

    def test_compare_and_set_bumps_the_version_and_resets_the_expiry(
        self, store: KeyValueStore, clock: FakeClock
    ) -> None:
        key = new_key("circuit")
        store.create(key, {"state": "closed"}, ttl_s=10)
        clock.advance(5)
        opened = store.compare_and_set(key, {"state": "open"}, expected_version=1, ttl_s=10)
        assert (opened.value, opened.version, opened.expires_at) == (
            {"state": "open"},
            2,
            clock() + timedelta(seconds=10),
        )
        forever = store.compare_and_set(key, {"state": "half_open"}, expected_version=2)
        assert (forever.version, forever.expires_at) == (3, None)
        assert store.get(key) == forever

    def test_compare_and_set_with_a_stale_version_is_a_conflict_naming_the_actual_one(
        self, store: KeyValueStore
    ) -> None:
        key = new_key("circuit")
        store.create(key, {"state": "closed"})
        store.compare_and_set(key, {"state": "open"}, expected_version=1)
        with pytest.raises(VersionConflict) as info:
            store.compare_and_set(key, {"state": "closed"}, expected_version=1)
        assert (info.value.key, info.value.expected, info.value.actual) == (key, 1, 2)
        assert (info.value.code, info.value.status) == ("kv_version_conflict", 409)
        entry = store.get(key)
        assert entry is not None and (entry.value, entry.version) == ({"state": "open"}, 2)

    def test_compare_and_set_expecting_absent(self, store: KeyValueStore) -> None:
        key = new_key("circuit")
        created = store.compare_and_set(key, {"state": "closed"}, expected_version=None)
        assert created.version == 1
        with pytest.raises(VersionConflict) as info:
            store.compare_and_set(key, {"state": "open"}, expected_version=None)
        assert (info.value.expected, info.value.actual) == (None, 1)
        with pytest.raises(VersionConflict) as missing:
            store.compare_and_set(new_key(), {"state": "open"}, expected_version=1)
        assert (missing.value.expected, missing.value.actual) == (1, None)

    def test_an_expired_entry_is_absent_to_compare_and_set(self, store: KeyValueStore, clock: FakeClock) -> None:
        key = new_key("rate")
        store.create(key, {"tokens": 5}, ttl_s=1)
        clock.advance(1)
        with pytest.raises(VersionConflict) as info:
            store.compare_and_set(key, {"tokens": 4}, expected_version=1)
        assert info.value.actual is None
        fresh = store.compare_and_set(key, {"tokens": 10}, expected_version=None, ttl_s=1)
        assert (fresh.value, fresh.version) == ({"tokens": 10}, 1)

    # -- delete --------------------------------------------------------------------------------

    def test_delete_without_an_expected_version(self, store: KeyValueStore) -> None:
        key = new_key()
        store.create(key, {})
        assert store.delete(key) is True
        assert store.get(key) is None
        assert store.delete(key) is False
        assert store.create(key, {"again": True}) is not None  # a new life, version 1

    def test_delete_with_an_expected_version(self, store: KeyValueStore) -> None:
        key = new_key()
        store.create(key, {})
        store.compare_and_set(key, {"n": 1}, expected_version=1)
        with pytest.raises(VersionConflict) as info:
            store.delete(key, expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert store.get(key) is not None
        assert store.delete(key, expected_version=2) is True
        assert store.get(key) is None
        assert store.delete(key, expected_version=2) is False

    def test_delete_of_an_expired_entry_deletes_nothing(self, store: KeyValueStore, clock: FakeClock) -> None:
        key = new_key()
        store.create(key, {}, ttl_s=5)
        clock.advance(6)
        assert store.delete(key) is False
        assert store.delete(key, expected_version=1) is False

    # -- leases --------------------------------------------------------------------------------

    def test_a_free_lease_is_granted(self, store: KeyValueStore, clock: FakeClock) -> None:
        name = new_key("drain/sub-a")
        lease = store.acquire_lease(name, "instance-1", ttl_s=30)
        assert lease == Lease(name, "instance-1", clock() + timedelta(seconds=30), 1)

    def test_a_live_lease_is_refused_to_another_holder(self, store: KeyValueStore, clock: FakeClock) -> None:
        name = new_key("drain/sub-a")
        store.acquire_lease(name, "instance-1", ttl_s=30)
        clock.advance(29)
        assert store.acquire_lease(name, "instance-2", ttl_s=30) is None
        assert store.release_lease(name, "instance-2") is False
        renewed = store.acquire_lease(name, "instance-1", ttl_s=30)
        assert renewed is not None and renewed.holder == "instance-1"

    def test_the_holder_renews_and_extends_its_lease(self, store: KeyValueStore, clock: FakeClock) -> None:
        name = new_key("runtime/singleton")
        first = store.acquire_lease(name, "instance-1", ttl_s=10)
        clock.advance(8)
        renewed = store.acquire_lease(name, "instance-1", ttl_s=10)
        assert first is not None and renewed is not None
        assert (renewed.version, renewed.expires_at) == (2, clock() + timedelta(seconds=10))
        assert renewed.expires_at > first.expires_at
        clock.advance(8)  # past the first expiry, inside the renewed one
        assert store.acquire_lease(name, "instance-2", ttl_s=10) is None

    def test_an_expired_lease_is_taken_over(self, store: KeyValueStore, clock: FakeClock) -> None:
        name = new_key("drain/sub-a")
        store.acquire_lease(name, "instance-1", ttl_s=10)
        clock.advance(10)
        taken = store.acquire_lease(name, "instance-2", ttl_s=10)
        assert taken is not None and (taken.holder, taken.version) == ("instance-2", 1)
        assert store.release_lease(name, "instance-1") is False  # the old holder lost it
        assert store.acquire_lease(name, "instance-1", ttl_s=10) is None

    def test_only_the_holder_releases_a_lease(self, store: KeyValueStore) -> None:
        name = new_key("drain/sub-a")
        store.acquire_lease(name, "instance-1", ttl_s=30)
        assert store.release_lease(name, "instance-2") is False
        assert store.acquire_lease(name, "instance-2", ttl_s=30) is None
        assert store.release_lease(name, "instance-1") is True
        assert store.release_lease(name, "instance-1") is False
        assert store.acquire_lease(name, "instance-2", ttl_s=30) is not None

    def test_a_lease_is_an_entry_under_the_lease_prefix(self, store: KeyValueStore) -> None:
        name = new_key("drain/sub-a")
        store.acquire_lease(name, "instance-1", ttl_s=30)
        entry = store.get(f"lease/{name}")
        assert entry is not None and entry.value == {"holder": "instance-1"}
        assert store.get(name) is None

    # -- concurrency ---------------------------------------------------------------------------

    def test_of_8_concurrent_creators_of_one_key_exactly_one_wins(self, store: KeyValueStore) -> None:
        key = new_key("ingress/seen/listener-a")
        results = run_threads(8, lambda i: store.create(key, {"by": i}, ttl_s=60))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert store.get(key) == winners[0]

    def test_concurrent_compare_and_set_increments_with_retry_reach_the_exact_total(self, store: KeyValueStore) -> None:
        key = new_key("rate")
        store.create(key, {"n": 0})
        threads, increments = 4, 5

        def work(_i: int) -> int:
            conflicts = 0
            for _ in range(increments):
                while True:
                    current = store.get(key)
                    assert current is not None
                    try:
                        store.compare_and_set(key, {"n": current.value["n"] + 1}, expected_version=current.version)
                        break
                    except VersionConflict:
                        conflicts += 1
            return conflicts

        run_threads(threads, work)
        final = store.get(key)
        assert final is not None
        assert (final.value, final.version) == ({"n": threads * increments}, 1 + threads * increments)

    def test_of_concurrent_lease_takers_exactly_one_holds_it(self, store: KeyValueStore) -> None:
        name = new_key("drain/sub-a")
        results = run_threads(8, lambda i: store.acquire_lease(name, f"instance-{i}", ttl_s=30))
        holders = [r.holder for r in results if r is not None]
        assert len(holders) == 1
        entry = store.get(f"lease/{name}")
        assert entry is not None and entry.value == {"holder": holders[0]}
