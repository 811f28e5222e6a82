"""The event log: the store port, its adapters, and the outbox written with every append."""

from noetl_cloud.eventlog.port import (
    DuplicateEventId,
    DuplicateIdempotencyKey,
    EventStore,
    StreamVersionConflict,
)

__all__ = ["DuplicateEventId", "DuplicateIdempotencyKey", "EventStore", "StreamVersionConflict"]
