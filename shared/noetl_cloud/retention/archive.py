"""An execution's events as one Parquet object (pyarrow), and back to the rows replay folds.

Every column of ``event`` is kept; the JSONB columns travel as their JSON text and the timestamps at
microsecond precision in UTC, so an archived execution replays to the same checksums as it did live.
The object is stored content-addressed through a payload store (the archive bucket or folder): the
digest in ``execution_archive.archive_ref`` verifies it on every read.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from noetl_cloud.errors import ConfigError
from noetl_cloud.eventlog.stored import stored_causation, stored_fields, stored_stream
from noetl_cloud.payload.bootstrap import payload_store
from noetl_cloud.payload.port import ObjectPayloadStore
from noetl_cloud.settings import Settings

MEDIA_TYPE = "application/vnd.apache.parquet"
_TIME = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        ("position", pa.int64()),
        ("event_id", pa.int64()),
        ("tenant_id", pa.string()),
        ("organization_id", pa.string()),
        ("execution_id", pa.int64()),
        ("stream_id", pa.string()),
        ("stream_version", pa.int64()),
        ("aggregate_id", pa.string()),
        ("aggregate_type", pa.string()),
        ("event_type", pa.string()),
        ("schema_name", pa.string()),
        ("schema_version", pa.int32()),
        ("event_time", _TIME),
        ("ingest_time", _TIME),
        ("producer", pa.string()),
        ("causation_id", pa.string()),
        ("correlation_id", pa.string()),
        ("idempotency_key", pa.string()),
        ("payload", pa.string()),
        ("payload_ref", pa.string()),
        ("meta", pa.string()),
        ("envelope_checksum", pa.string()),
    ]
)
COLUMNS = tuple(SCHEMA.names)
_JSON = ("payload", "payload_ref", "meta")
# The rows' form (noetl_cloud.eventlog.stored): archives written before migration 0012 have no such key
# and hold every envelope field whole, those of form 0012 their stream and causation ids whole;
# decode() gives every archive's rows in the stored form.
_FORM = {b"noetl.event_row": b"0018"}


def encode(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Rows of ``event`` (mappings of its columns, in store order) as Parquet bytes."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for row in rows:
        for name in COLUMNS:
            value = row[name]
            if name in _JSON and value is not None:
                value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            elif name == "envelope_checksum" and isinstance(value, (bytes, memoryview)):
                value = bytes(value).hex()  # stored as its bytes (migration 0012), archived as hex
            columns[name].append(value)
    table = pa.table(columns, schema=SCHEMA.with_metadata(_FORM))
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def decode(data: bytes) -> list[dict[str, Any]]:
    """The rows :func:`encode` wrote, with their JSON columns parsed again, in the stored form."""
    table = pq.read_table(io.BytesIO(data))
    form = (table.schema.metadata or {}).get(b"noetl.event_row")
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        for name in _JSON:
            if row[name] is not None:
                row[name] = json.loads(row[name])
        if form is None:  # archived before 0012: its envelope fields whole, as the stored form
            row.update(
                stored_fields(
                    tenant_id=row["tenant_id"],
                    organization_id=row["organization_id"],
                    producer=row["producer"],
                    idempotency_key=row["idempotency_key"],
                    event_type=row["event_type"],
                    event_id=row["event_id"],
                    execution_id=None if row["execution_id"] is None else str(row["execution_id"]),
                    stream_id=row["stream_id"],
                    schema_name=row["schema_name"],
                    aggregate_id=row["aggregate_id"],
                    correlation_id=row["correlation_id"],
                    causation_id=row["causation_id"],
                )
            )
        elif form == b"0012":  # archived before 0018: its stream and causation ids whole
            row["stream_id"] = stored_stream(row["stream_id"], row["execution_id"])
            row["causation_id"] = stored_causation(row["causation_id"], row["event_id"])
    return rows


def archive_store(settings: Settings, tenant_id: str, organization_id: str) -> ObjectPayloadStore | None:
    """The archive store of one tenant and organization: the payload backend, at the archive bucket or
    folder; ``None`` when neither is set."""
    if settings.payload_backend is None:
        return None
    location = settings.archive_dir if settings.payload_backend == "filesystem" else settings.archive_bucket
    if location is None:
        return None
    if location in (settings.payload_bucket, settings.payload_dir):
        # The payload bucket deletes objects at its own age; an archive must outlive it.
        raise ConfigError("the archive bucket/folder must not be the payload one", code="config_invalid")
    update = {"tenant_id": tenant_id, "organization_id": organization_id}
    update["payload_dir" if settings.payload_backend == "filesystem" else "payload_bucket"] = location
    return payload_store(settings.model_copy(update=update))
