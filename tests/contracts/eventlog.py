"""The event store contract: one suite, run against every adapter.

A subclass provides the ``store`` fixture (and ``concurrent_store`` for the threaded tests).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from noetl_cloud.envelope import EventEnvelope, EventFactory
from noetl_cloud.eventlog import DuplicateIdempotencyKey, EventStore, StreamVersionConflict
from noetl_cloud.ids import SnowflakeGenerator

IDS = SnowflakeGenerator(node_id=7)
FACTORY = EventFactory(tenant_id="t1", organization_id="o1", producer="noetl://test", next_id=IDS.next_id)


def make_event(stream_id: str, event_type: str = "step.done", **kw: Any) -> EventEnvelope:
    kw.setdefault("execution_id", stream_id.split("/")[1] if stream_id.startswith("execution/") else None)
    return FACTORY.new(event_type, stream_id=stream_id, aggregate_type="test", aggregate_id=stream_id, **kw)


def new_stream() -> str:
    return f"execution/{IDS.next_id()}"


class EventStoreContract:
    def test_append_assigns_consecutive_versions_and_seals(self, store: EventStore) -> None:
        stream = new_stream()
        first = store.append(stream, [make_event(stream), make_event(stream)], expected_version=0)
        second = store.append(stream, [make_event(stream)], expected_version=2)
        assert [e.stream_version for e in first + second] == [1, 2, 3]
        assert all(e.verify_checksum() and e.ingest_time is not None for e in first + second)
        assert store.stream_version(stream) == 3

    def test_read_stream_returns_what_was_appended_in_order(self, store: EventStore) -> None:
        stream = new_stream()
        sealed = store.append(stream, [make_event(stream, payload={"n": i}) for i in range(5)], expected_version=0)
        assert store.read_stream(stream) == sealed
        assert [e.payload["n"] for e in store.read_stream(stream, from_version=4)] == [3, 4]
        assert all(e.verify_checksum() for e in store.read_stream(stream))

    def test_stale_expected_version_is_a_typed_conflict_and_writes_nothing(self, store: EventStore) -> None:
        stream = new_stream()
        store.append(stream, [make_event(stream)], expected_version=0)
        with pytest.raises(StreamVersionConflict) as info:
            store.append(stream, [make_event(stream), make_event(stream)], expected_version=0)
        assert (info.value.expected, info.value.actual, info.value.status) == (0, 1, 409)
        with pytest.raises(StreamVersionConflict):
            store.append(stream, [make_event(stream)], expected_version=5)
        assert store.stream_version(stream) == 1
        assert len(store.read_stream(stream)) == 1

    def test_expected_version_none_appends_at_the_tip(self, store: EventStore) -> None:
        stream = new_stream()
        store.append(stream, [make_event(stream)])
        store.append(stream, [make_event(stream), make_event(stream)])
        assert [e.stream_version for e in store.read_stream(stream)] == [1, 2, 3]

    def test_a_key_is_unique_within_its_execution_and_among_events_of_no_execution(self, store: EventStore) -> None:
        first, second = new_stream(), new_stream()
        store.append(first, [make_event(first, idempotency_key="retry/1")])
        store.append(second, [make_event(second, idempotency_key="retry/1")])  # another execution's key
        with pytest.raises(DuplicateIdempotencyKey):  # a stream of the same execution
            store.append(
                f"{first}/side",
                [make_event(f"{first}/side", idempotency_key="retry/1", execution_id=first.split("/")[1])],
            )
        catalog, other = f"catalog/{new_stream()}", f"subscription/{new_stream()}"
        store.append(catalog, [make_event(catalog, idempotency_key="global/1")])
        with pytest.raises(DuplicateIdempotencyKey) as raised:  # no execution: unique among all such events
            store.append(other, [make_event(other, idempotency_key="global/1")])
        assert raised.value.keys == ["global/1"]
        assert (store.stream_version(f"{first}/side"), store.stream_version(other)) == (0, 0)

    def test_reused_idempotency_key_rejects_the_whole_batch(self, store: EventStore) -> None:
        stream = new_stream()
        store.append(stream, [make_event(stream, idempotency_key=f"{stream}/k1")])
        with pytest.raises(DuplicateIdempotencyKey) as info:
            store.append(
                stream,
                [
                    make_event(stream, idempotency_key=f"{stream}/k2"),
                    make_event(stream, idempotency_key=f"{stream}/k1"),
                ],
            )
        assert info.value.keys == [f"{stream}/k1"]
        assert store.stream_version(stream) == 1
        # k2 was not consumed by the failed batch.
        store.append(stream, [make_event(stream, idempotency_key=f"{stream}/k2")])
        assert store.stream_version(stream) == 2

    def test_batch_naming_another_stream_is_refused(self, store: EventStore) -> None:
        stream = new_stream()
        with pytest.raises(ValueError):
            store.append(stream, [make_event(new_stream())])
        with pytest.raises(ValueError):
            store.append(stream, [])

    def test_read_execution_spans_streams_and_is_tenant_scoped(self, store: EventStore) -> None:
        execution = str(IDS.next_id())
        main, child = f"execution/{execution}", f"execution/{execution}/stage/s1"
        a = store.append(main, [make_event(main, execution_id=execution)])
        b = store.append(child, [make_event(child, execution_id=execution)])
        c = store.append(main, [make_event(main, execution_id=execution)])
        assert store.read_execution(execution) == a + b + c
        assert store.read_execution(execution, tenant_id="t1", organization_id="o1") == a + b + c
        assert store.read_execution(execution, tenant_id="other") == []
        assert store.read_execution(execution, tenant_id="t1", organization_id="other") == []

    def test_concurrent_writers_with_expected_versions(self, concurrent_store: EventStore) -> None:
        """8 writers race on one stream: each round exactly one wins, the rest get a typed conflict;
        with retries every writer lands all its events and the stream has no gap."""
        store, writers, rounds = concurrent_store, 8, 5
        stream = new_stream()
        barrier = threading.Barrier(writers)
        wins: list[int] = []
        conflicts: list[StreamVersionConflict] = []
        unexpected: list[BaseException] = []
        lock = threading.Lock()

        def race(writer: int) -> None:
            try:
                for _ in range(rounds):
                    version = store.stream_version(stream)
                    barrier.wait()
                    try:
                        store.append(stream, [make_event(stream, payload={"w": writer})], expected_version=version)
                        with lock:
                            wins.append(writer)
                    except StreamVersionConflict as exc:
                        with lock:
                            conflicts.append(exc)
                    barrier.wait()
                # Then every writer appends 5 more, retrying on conflict.
                for i in range(5):
                    while True:
                        version = store.stream_version(stream)
                        try:
                            store.append(
                                stream, [make_event(stream, payload={"w": writer, "i": i})], expected_version=version
                            )
                            break
                        except StreamVersionConflict:
                            continue
            except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
                unexpected.append(exc)

        threads = [threading.Thread(target=race, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not unexpected
        assert len(wins) == rounds and len(conflicts) == rounds * (writers - 1)
        assert all(c.stream_id == stream for c in conflicts)
        events = store.read_stream(stream)
        assert [e.stream_version for e in events] == list(range(1, rounds + writers * 5 + 1))
        assert all(
            sum(1 for e in events if e.payload == {"w": w, "i": i}) == 1 for w in range(writers) for i in range(5)
        )
