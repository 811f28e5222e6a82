"""The event store port and its typed errors.

A stream is an ordered, gap-free sequence of events (``stream_version`` 1, 2, 3, ...). An append
names the version the writer believes the stream is at; if another writer got there first, the
append fails with :class:`StreamVersionConflict` and writes nothing. ``expected_version=None``
appends at the tip whatever it is (for streams many writers extend, where order between them
does not matter but gap-freeness does).

Every append also writes one outbox row per event (topic ``noetl-events``, ordering key = the
execution id or the stream id) in the same transaction, so an event is published if and only if
it was committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.errors import Conflict


class StreamVersionConflict(Conflict):
    """The stream was not at the version the writer expected."""

    code = "stream_version_conflict"

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream_id!r} is at version {actual}, not {expected}",
            details={"stream_id": stream_id, "expected_version": expected, "actual_version": actual},
        )
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class DuplicateIdempotencyKey(Conflict):
    """An event with the same idempotency key was already appended: the effect is already durable."""

    code = "duplicate_idempotency_key"

    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__(
            f"idempotency key(s) already used: {', '.join(keys)}", details={"idempotency_keys": list(keys)}
        )
        self.keys = list(keys)


class DuplicateEventId(Conflict):
    """An event id was reused (two writers minted the same id, or a retry resent an event)."""

    code = "duplicate_event_id"


@runtime_checkable
class EventStore(Protocol):
    """Append-only store of event envelopes, ordered per stream."""

    def append(
        self, stream_id: str, events: Sequence[EventEnvelope], expected_version: int | None = None
    ) -> list[EventEnvelope]:
        """Append ``events`` to ``stream_id`` atomically and return them sealed.

        Sealed means: ``stream_version`` assigned (the first is the stream's current version plus
        one), ``ingest_time`` set and ``envelope_checksum`` computed. Raises
        :class:`StreamVersionConflict` when ``expected_version`` is not the current version,
        :class:`DuplicateIdempotencyKey` when any event's key was used before; nothing is written
        then. Every event must name ``stream_id`` as its stream.
        """
        ...

    def stream_version(self, stream_id: str) -> int:
        """The current version of a stream; 0 for a stream that has no events."""
        ...

    def read_stream(self, stream_id: str, from_version: int = 1) -> list[EventEnvelope]:
        """The events of a stream from ``from_version`` on, in stream order."""
        ...

    def read_execution(
        self, execution_id: str, *, tenant_id: str | None = None, organization_id: str | None = None
    ) -> list[EventEnvelope]:
        """Every event of an execution, across its streams, in store (commit) order.

        With ``tenant_id``/``organization_id`` only that tenant's events are returned.
        """
        ...


def check_batch(stream_id: str, events: Sequence[EventEnvelope]) -> None:
    """Refuse an empty batch or one whose events name another stream."""
    if not events:
        raise ValueError("an append needs at least one event")
    for envelope in events:
        if envelope.stream_id != stream_id:
            raise ValueError(f"event {envelope.event_id} names stream {envelope.stream_id!r}, not {stream_id!r}")


def append_each_once(store: EventStore, envelopes: Iterable[EventEnvelope]) -> tuple[int, int]:
    """Append each event to its own stream on its own, unless its idempotency key is already in the log
    (a retried report of an at-least-once writer): ``(recorded, duplicates)``."""
    recorded = duplicates = 0
    for envelope in envelopes:
        try:
            store.append(envelope.stream_id, [envelope])
        except DuplicateIdempotencyKey:
            duplicates += 1
        else:
            recorded += 1
    return recorded, duplicates
