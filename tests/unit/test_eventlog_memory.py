from __future__ import annotations

import pytest

from noetl_cloud.eventlog.memory import InMemoryEventStore
from tests.contracts.eventlog import EventStoreContract, make_event, new_stream


class TestInMemoryEventStore(EventStoreContract):
    @pytest.fixture
    def store(self) -> InMemoryEventStore:
        return InMemoryEventStore()

    @pytest.fixture
    def concurrent_store(self) -> InMemoryEventStore:
        return InMemoryEventStore()


def test_memory_store_keeps_one_outbox_message_per_execution_per_append() -> None:
    store = InMemoryEventStore(events_topic="noetl-events")
    stream = new_stream()
    sealed = store.append(stream, [make_event(stream), make_event(stream)])
    sealed += store.append(stream, [make_event(stream)])
    assert [m["event_id"] for m in store.outbox] == [int(sealed[1].event_id), int(sealed[2].event_id)]
    assert [m["data"]["events"] for m in store.outbox] == [2, 1]
    assert {m["topic"] for m in store.outbox} == {"noetl-events"}
