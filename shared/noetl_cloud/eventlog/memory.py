"""In-memory event store: unit tests and the embedded local mode."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from noetl_cloud.envelope import EventEnvelope, utc_now
from noetl_cloud.eventlog.outbox import mirror_messages
from noetl_cloud.eventlog.port import (
    DuplicateEventId,
    DuplicateIdempotencyKey,
    StreamVersionConflict,
    check_batch,
)


@dataclass
class InMemoryEventStore:
    """Thread-safe; appends are atomic under one lock."""

    events_topic: str = "noetl-events"
    events: list[EventEnvelope] = field(default_factory=list)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    _streams: dict[str, list[EventEnvelope]] = field(default_factory=dict)
    _keys: set[tuple[str, str]] = field(default_factory=set)  # (execution, key): unique by execution, eventlog.keys
    _ids: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def append(
        self, stream_id: str, events: Sequence[EventEnvelope], expected_version: int | None = None
    ) -> list[EventEnvelope]:
        check_batch(stream_id, events)
        with self._lock:
            stream = self._streams.get(stream_id, [])
            current = len(stream)
            if expected_version is not None and expected_version != current:
                raise StreamVersionConflict(stream_id, expected_version, current)
            scoped = [(e.execution_id or "", e.idempotency_key) for e in events if e.idempotency_key]
            used = [key for key in scoped if key in self._keys]
            if used or len(set(scoped)) != len(scoped):
                raise DuplicateIdempotencyKey([key for _, key in used or scoped])
            reused = [e.event_id for e in events if e.event_id in self._ids]
            if reused or len({e.event_id for e in events}) != len(events):
                raise DuplicateEventId(f"event id(s) already stored: {reused}")
            now = utc_now()
            sealed = [e.sealed(stream_version=current + i, ingest_time=now) for i, e in enumerate(events, 1)]
            self._streams[stream_id] = stream + sealed
            self.events.extend(sealed)
            self._keys.update(scoped)
            self._ids.update(e.event_id for e in sealed)
            self.outbox.extend(mirror_messages(sealed, self.events_topic))
            return sealed

    def stream_version(self, stream_id: str) -> int:
        with self._lock:
            return len(self._streams.get(stream_id, ()))

    def read_stream(self, stream_id: str, from_version: int = 1) -> list[EventEnvelope]:
        with self._lock:
            return list(self._streams.get(stream_id, ())[max(from_version, 1) - 1 :])

    def read_execution(
        self, execution_id: str, *, tenant_id: str | None = None, organization_id: str | None = None
    ) -> list[EventEnvelope]:
        with self._lock:
            return [
                e
                for e in self.events
                if e.execution_id == execution_id
                and (tenant_id is None or e.tenant_id == tenant_id)
                and (organization_id is None or e.organization_id == organization_id)
            ]
