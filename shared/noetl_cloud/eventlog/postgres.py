"""PostgreSQL event store: the canonical, append-only log of Cloud SQL.

An append is one transaction: bump the stream head with a compare-and-set (a stale expected
version updates no row, which is a typed conflict, not an aborted transaction), insert the
sealed events, insert their outbox rows. :meth:`PostgresEventStore.append_in` runs the same
statements on a connection the caller holds, so a service can write its own rows (an
execution, a command) in the very transaction that writes their events.

The outbox rows an append writes are handed back through ``outbox=`` (a list the writer passes):
after its commit the writer gives them to the relay (:meth:`PostgresEventStore.hand_off`), so an
event reaches ``noetl-events`` only once it is durable; a writer that crashes or fails to publish
leaves them ``pending`` for the sweep. :meth:`PostgresEventStore.append` (its own transaction) hands
its rows off itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, and_, or_, select, text
from sqlalchemy.exc import IntegrityError

from noetl_cloud.db.bulk import InsertBatch, as_bytea
from noetl_cloud.db.schema import event as event_table
from noetl_cloud.db.schema import event_key as key_table
from noetl_cloud.db.schema import outbox as outbox_table
from noetl_cloud.db.schema import stream as stream_table
from noetl_cloud.envelope import EventEnvelope, PayloadRef, utc_now
from noetl_cloud.eventlog.keys import key_digest
from noetl_cloud.eventlog.outbox import mirror_messages
from noetl_cloud.eventlog.port import (
    DuplicateEventId,
    DuplicateIdempotencyKey,
    StreamVersionConflict,
    check_batch,
)
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.eventlog.stored import envelope_fields, stored_fields, stream_lookup

_BUMP_ANY = text(
    "INSERT INTO stream (stream_id, version) VALUES (:stream_id, :n) "
    "ON CONFLICT (stream_id) DO UPDATE SET version = stream.version + :n, updated_at = now() "
    "RETURNING version"
)
# A head read earlier in the transaction, moved by the batch that appends after it (a precondition).
_MOVE_HEAD = "UPDATE stream SET version = :new, updated_at = now() WHERE stream_id = :stream_id AND version = :head"
_CREATE = text(
    "INSERT INTO stream (stream_id, version) VALUES (:stream_id, :n) "
    "ON CONFLICT (stream_id) DO NOTHING RETURNING version"
)
_BUMP_EXPECTED = text(
    "UPDATE stream SET version = version + :n, updated_at = now() "
    "WHERE stream_id = :stream_id AND version = :expected RETURNING version"
)
# The heads as one JSON parameter (pg8000 escapes a text-array parameter character by character),
# bumped in stream-id order.
_BUMP_MANY = text(
    "INSERT INTO stream (stream_id, version) "
    "SELECT stream_id, n FROM jsonb_to_recordset(CAST(:heads AS jsonb)) AS h(stream_id text, n bigint) "
    "ORDER BY stream_id "
    "ON CONFLICT (stream_id) DO UPDATE SET version = stream.version + excluded.version, updated_at = now() "
    "RETURNING stream_id, version"
)
_VERSION = text("SELECT version FROM stream WHERE stream_id = :stream_id")
_RETURNING_OUTBOX = "RETURNING outbox_id, event_id, topic"


def _row(envelope: EventEnvelope) -> dict[str, Any]:
    # Left out when they are the defaults (NULL), rebuilt by every reader: noetl_cloud.eventlog.stored.
    compact = stored_fields(
        tenant_id=envelope.tenant_id,
        organization_id=envelope.organization_id,
        producer=envelope.producer,
        idempotency_key=envelope.idempotency_key,
        event_type=envelope.event_type,
        event_id=envelope.event_id,
        execution_id=envelope.execution_id,
        stream_id=envelope.stream_id,
        schema_name=envelope.schema_name,
        aggregate_id=envelope.aggregate_id,
        correlation_id=envelope.correlation_id,
        causation_id=envelope.causation_id,
    )
    return {
        "event_id": int(envelope.event_id),
        "tenant_id": envelope.tenant_id,
        "organization_id": envelope.organization_id,
        "execution_id": int(envelope.execution_id) if envelope.execution_id else None,
        "stream_id": compact["stream_id"],
        "stream_version": envelope.stream_version,
        "aggregate_id": compact["aggregate_id"],
        "aggregate_type": envelope.aggregate_type,
        "event_type": envelope.event_type,
        "schema_name": compact["schema_name"],
        "schema_version": envelope.schema_version,
        "event_time": envelope.event_time,
        "ingest_time": envelope.ingest_time,
        "producer": compact["producer"],
        "causation_id": compact["causation_id"],
        "correlation_id": compact["correlation_id"],
        "idempotency_key": compact["idempotency_key"],
        "payload": envelope.payload,
        "payload_ref": envelope.payload_ref.model_dump(mode="json") if envelope.payload_ref else None,
        "meta": envelope.meta,
        # The checksum's 32 bytes, not its 64 hex digits.
        "envelope_checksum": None if envelope.envelope_checksum is None else as_bytea(envelope.envelope_checksum),
    }


def checksum_hex(value: Any) -> str | None:
    """A stored ``envelope_checksum`` (bytes since migration 0012) as the envelope's hex text."""
    if value is None or isinstance(value, str):
        return value
    return bytes(value).hex()


def envelope_from_row(row: Any) -> EventEnvelope:
    m = row._mapping
    return EventEnvelope(
        **envelope_fields(m),
        event_id=str(m["event_id"]),
        tenant_id=m["tenant_id"],
        organization_id=m["organization_id"],
        execution_id=None if m["execution_id"] is None else str(m["execution_id"]),
        stream_version=m["stream_version"],
        aggregate_type=m["aggregate_type"],
        event_type=m["event_type"],
        schema_version=m["schema_version"],
        event_time=m["event_time"],
        ingest_time=m["ingest_time"],
        payload=m["payload"],
        payload_ref=PayloadRef(**m["payload_ref"]) if m["payload_ref"] else None,
        meta=m["meta"],
        envelope_checksum=checksum_hex(m["envelope_checksum"]),
    )


_COLUMNS = [c for c in event_table.c if c.name != "position"]


def run_batch(
    conn: Connection, batch: InsertBatch, *, guard: str = "TRUE", params: dict[str, Any] | None = None
) -> bool:
    """:meth:`InsertBatch.execute`, with a reused event id reported as :class:`DuplicateEventId`."""
    try:
        return batch.execute(conn, guard=guard, params=params)
    except IntegrityError as exc:
        # A partition's primary key has its own name (``event_p20261125_pkey``): the detail names the column.
        if "Key (event_id)=" in str(exc.orig):
            raise DuplicateEventId("an event id in this batch is already stored") from None
        raise


class PostgresEventStore:
    def __init__(
        self,
        engine: Engine,
        *,
        events_topic: str = "noetl-events",
        relay: Callable[[Sequence[OutboxRow]], None] | None = None,
    ) -> None:
        self.engine = engine
        self.events_topic = events_topic
        self._relay = relay  # without one, committed rows wait for the sweep

    def hand_off(self, rows: Sequence[OutboxRow]) -> None:
        """Give the outbox rows of a committed write to the relay (the caller commits first)."""
        if rows and self._relay is not None:
            self._relay(rows)

    def append(
        self, stream_id: str, events: Sequence[EventEnvelope], expected_version: int | None = None
    ) -> list[EventEnvelope]:
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            sealed = self.append_in(conn, stream_id, events, expected_version, outbox=rows)
        self.hand_off(rows)
        return sealed

    def append_in(
        self,
        conn: Connection,
        stream_id: str,
        events: Sequence[EventEnvelope],
        expected_version: int | None = None,
        *,
        outbox: list[OutboxRow] | None = None,
        head: int | None = None,
    ) -> list[EventEnvelope]:
        """Append inside the caller's transaction; an error leaves it to be rolled back.

        ``outbox``: a list the outbox rows written are appended to, for the writer to publish after
        its commit (never before: the rows do not exist for anyone else until then). ``head``: the
        stream's version read earlier in the transaction (see :meth:`append_to`); one round trip
        instead of two unless another writer appended since.
        """
        batch = InsertBatch()
        sealed = self.append_to(conn, batch, stream_id, events, expected_version, outbox=outbox, head=head)
        if run_batch(conn, batch) or head is None:
            return sealed
        return self.append_in(conn, stream_id, events, expected_version, outbox=outbox)

    def append_to(
        self,
        conn: Connection,
        batch: InsertBatch,
        stream_id: str,
        events: Sequence[EventEnvelope],
        expected_version: int | None = None,
        *,
        outbox: list[OutboxRow] | None = None,
        head: int | None = None,
    ) -> list[EventEnvelope]:
        """:meth:`append_in` with the events and their outbox rows as parts of the caller's ``batch``
        (the stream head is bumped now: the events' versions, sealed into their checksums, come from it).

        ``head``: the stream's version as the caller read it earlier in its transaction. The events are
        sealed from it with no round trip, and the head's move becomes the batch's precondition: when
        another writer appended since, the batch writes nothing and answers false, and the caller
        appends again without ``head``."""
        check_batch(stream_id, events)
        n = len(events)
        if head is not None:
            batch.precondition(_MOVE_HEAD, {"stream_id": stream_id, "head": head, "new": head + n})
            return self._seal_and_stage(conn, batch, events, head + 1, outbox)
        params = {"stream_id": stream_id, "n": n, "expected": expected_version}
        if expected_version is None:
            version = conn.execute(_BUMP_ANY, params).scalar_one()
        else:
            statement = _CREATE if expected_version == 0 else _BUMP_EXPECTED
            version = conn.execute(statement, params).scalar()
            if version is None:
                raise StreamVersionConflict(stream_id, expected_version, self._version_in(conn, stream_id))
        return self._seal_and_stage(conn, batch, events, version - n + 1, outbox)

    def _seal_and_stage(
        self,
        conn: Connection,
        batch: InsertBatch,
        events: Sequence[EventEnvelope],
        first: int,
        outbox: list[OutboxRow] | None,
    ) -> list[EventEnvelope]:
        now = utc_now()
        sealed = [e.sealed(stream_version=first + i, ingest_time=now) for i, e in enumerate(events)]
        self._stage_sealed(conn, batch, sealed, outbox)
        return sealed

    def append_new_streams_in(
        self,
        conn: Connection,
        streams: Sequence[tuple[str, Sequence[EventEnvelope]]],
        *,
        outbox: list[OutboxRow] | None = None,
    ) -> None:
        """Start many new streams in bulk inside the caller's transaction (each at version 1).

        For writers that mint their stream ids (a new execution's stream): one statement for the
        stream heads, the events and their outbox rows, whatever the number of streams. A stream
        that already exists is a :class:`StreamVersionConflict`. ``outbox`` as for :meth:`append_in`.
        """
        batch = InsertBatch()
        self.append_new_streams_to(conn, batch, streams, outbox=outbox)
        run_batch(conn, batch)

    def append_new_streams_to(
        self,
        conn: Connection,
        batch: InsertBatch,
        streams: Sequence[tuple[str, Sequence[EventEnvelope]]],
        *,
        outbox: list[OutboxRow] | None = None,
    ) -> None:
        """:meth:`append_new_streams_in` as parts of the caller's :class:`InsertBatch`: written, and
        checked, when the caller executes the batch (with the rest of its rows, in one statement)."""
        for stream_id, events in streams:
            check_batch(stream_id, events)
        now = utc_now()
        sealed = [
            e.sealed(stream_version=i, ingest_time=now) for _stream, events in streams for i, e in enumerate(events, 1)
        ]
        heads = [{"stream_id": stream_id, "version": len(events)} for stream_id, events in streams]
        created = batch.insert(stream_table, heads, suffix="ON CONFLICT DO NOTHING", returning=("stream_id",))

        def check_heads() -> None:
            made = {stream_id for (stream_id,) in created.returned}
            if len(made) != len(heads):
                taken = sorted({str(h["stream_id"]) for h in heads} - made)[0]
                raise StreamVersionConflict(taken, 0, self._version_in(conn, taken))

        batch.after(check_heads)
        self._stage_sealed(conn, batch, sealed, outbox)

    def append_many_in(
        self,
        conn: Connection,
        streams: Sequence[tuple[str, Sequence[EventEnvelope]]],
        *,
        outbox: list[OutboxRow] | None = None,
    ) -> list[EventEnvelope]:
        """Append to many streams at any version inside the caller's transaction: one statement bumps
        every stream head (creating the missing ones), a few write the events and their outbox rows.

        For writers of many small streams in one transaction (a batch of frame commits). The heads
        are bumped in stream-id order, so two such batches over the same streams cannot deadlock.
        A stream given twice is a ``ValueError``. ``outbox`` as for :meth:`append_in`.
        """
        ordered = sorted(streams, key=lambda s: s[0])
        ids = [stream_id for stream_id, _events in ordered]
        if len(set(ids)) != len(ids):
            raise ValueError("a stream is given twice in one append_many_in")
        for stream_id, events in ordered:
            check_batch(stream_id, events)
        heads_param = json.dumps([{"stream_id": stream_id, "n": len(events)} for stream_id, events in ordered])
        bumped = conn.execute(_BUMP_MANY, {"heads": heads_param})
        heads = {stream_id: int(version) for stream_id, version in bumped}
        now = utc_now()
        sealed = [
            e.sealed(stream_version=heads[stream_id] - len(events) + i, ingest_time=now)
            for stream_id, events in ordered
            for i, e in enumerate(events, 1)
        ]
        rows = self._write_sealed(conn, sealed)
        if outbox is not None:
            outbox.extend(rows)
        return sealed

    def _write_sealed(self, conn: Connection, sealed: Sequence[EventEnvelope]) -> list[OutboxRow]:
        """Insert sealed events and their outbox rows (one statement); the outbox rows written."""
        batch, rows = InsertBatch(), list[OutboxRow]()
        self._stage_sealed(conn, batch, sealed, rows)
        run_batch(conn, batch)
        return rows

    def _stage_sealed(
        self, conn: Connection, batch: InsertBatch, sealed: Sequence[EventEnvelope], outbox: list[OutboxRow] | None
    ) -> None:
        """Add sealed events and their outbox rows to ``batch``. After it ran, a reused idempotency key
        is a :class:`DuplicateIdempotencyKey` naming what was reused (the caller's transaction is then
        rolled back); the outbox rows written are appended to ``outbox``, in insertion order."""
        # The keys first (``event_key``: ``event`` is partitioned, it cannot hold a unique key of its
        # own); an event whose key is taken is not written, nor are its outbox rows.
        keys = batch.insert(
            key_table,
            [
                {"key_digest": str(key_digest(e.idempotency_key, e.execution_id)), "event_id": int(e.event_id)}
                for e in sealed
                if e.idempotency_key
            ],
            suffix="ON CONFLICT (key_digest) DO NOTHING",
            returning=("event_id",),
        )
        inserted = batch.insert(
            event_table,
            [_row(e) for e in sealed],
            returning=("event_id",),
            only_with=(keys, "event_id"),
            unless_null="idempotency_key",
        )
        messages = mirror_messages(sealed, self.events_topic)
        written = batch.insert(
            outbox_table, messages, returning=("outbox_id", "event_id", "topic"), only_with=(inserted, "event_id")
        )

        def check() -> None:
            if len(inserted.returned) != len(sealed):
                raise DuplicateIdempotencyKey(self._used_keys(conn, sealed, {r[0] for r in inserted.returned}))
            if outbox is None:
                return
            # The rows as written, rebuilt from what was sent (no JSON read back): (event, topic) is unique.
            sent = {(m["event_id"], m["topic"]): m for m in messages}
            rows = []
            for outbox_id, event_id, topic in written.returned:
                m = sent[(event_id, topic)]
                rows.append(OutboxRow(outbox_id, topic, m["data"], m["attributes"], m["ordering_key"]))
            rows.sort(key=lambda row: row.outbox_id)  # insertion order: one execution's events publish in order
            outbox.extend(rows)

        batch.after(check)

    @staticmethod
    def _version_in(conn: Connection, stream_id: str) -> int:
        return int(conn.execute(_VERSION, {"stream_id": stream_id}).scalar() or 0)

    @staticmethod
    def _used_keys(conn: Connection, sealed: Sequence[EventEnvelope], inserted: set[int]) -> list[str]:
        """The keys of ``sealed`` that events other than those ``inserted`` hold (all of them when none
        do: the batch repeated a key of its own)."""
        keys = {key_digest(e.idempotency_key, e.execution_id): e.idempotency_key for e in sealed if e.idempotency_key}
        rows = conn.execute(
            select(key_table.c.key_digest, key_table.c.event_id).where(key_table.c.key_digest.in_(list(keys)))
        ).all()
        used = [keys[digest] for digest, event_id in rows if event_id not in inserted]
        return used or [e.idempotency_key for e in sealed if e.idempotency_key is not None]

    def stream_version(self, stream_id: str) -> int:
        with self.engine.connect() as conn:
            return self._version_in(conn, stream_id)

    def read_stream(self, stream_id: str, from_version: int = 1) -> list[EventEnvelope]:
        # As stored (noetl_cloud.eventlog.stored): the named execution's events relative to it, any
        # other event (of no execution, or of another one) whole. Every partition is read, as before
        # (the stream index holds only events of no execution): the runtime reads by execution.
        execution_id, relative, whole = stream_lookup(stream_id)
        column = event_table.c.stream_id
        matches = column == whole
        if execution_id is not None:
            matches = or_(and_(event_table.c.execution_id == execution_id, column == relative), matches)
        query = (
            select(*_COLUMNS)
            .where(matches, event_table.c.stream_version >= from_version)
            .order_by(event_table.c.stream_version)
        )
        with self.engine.connect() as conn:
            return [envelope_from_row(r) for r in conn.execute(query)]

    def read_execution(
        self, execution_id: str, *, tenant_id: str | None = None, organization_id: str | None = None
    ) -> list[EventEnvelope]:
        query = select(*_COLUMNS).where(event_table.c.execution_id == int(execution_id))
        if tenant_id is not None:
            query = query.where(event_table.c.tenant_id == tenant_id)
        if organization_id is not None:
            query = query.where(event_table.c.organization_id == organization_id)
        with self.engine.connect() as conn:
            return [envelope_from_row(r) for r in conn.execute(query.order_by(event_table.c.position))]
