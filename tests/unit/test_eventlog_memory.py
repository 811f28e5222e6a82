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


def test_memory_store_keeps_one_outbox_message_per_event() -> None:
    store = InMemoryEventStore(events_topic="noetl-events")
    stream = new_stream()
    sealed = store.append(stream, [make_event(stream), make_event(stream)])
    assert [m["event_id"] for m in store.outbox] == [int(e.event_id) for e in sealed]
    assert {m["topic"] for m in store.outbox} == {"noetl-events"}
