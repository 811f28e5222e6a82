"""Arrow IPC stream serialization of row windows (spec §6.2, §6.6).

A row window (a frame's rows: a list of JSON objects) becomes one Arrow IPC *stream* (media type
``application/vnd.apache.arrow.stream``), one column per key in first-seen order with types inferred
across every row. When the columnar form cannot carry the rows exactly (values of mixed types in one
column, ragged nested objects, keys missing from some rows), the window is written as one ``utf8``
column of canonical JSON per row instead, flagged in the schema metadata (``noetl.encoding:
json-rows``); :func:`ipc_to_rows` reads both. The choice is checked by decoding: what is stored always
reads back as the rows given.

``schema_digest`` is the sha256 of Arrow's serialized schema (not of the values), so two windows of the
same logical shape share it. The payload reference of a stored window (:func:`store_rows`) carries
``row_count``, ``schema_digest``, ``byte_length``, ``compression`` and the content sha256.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]

from noetl_cloud.envelope import canonical_json, sha256_hex
from noetl_cloud.payload.port import PayloadStore, as_reference

ARROW_STREAM: Final = "application/vnd.apache.arrow.stream"
ENCODING_KEY: Final = b"noetl.encoding"
JSON_ROWS: Final = b"json-rows"


@dataclass(frozen=True)
class ArrowWindow:
    """One row window as Arrow IPC stream bytes."""

    data: bytes
    schema_digest: str
    row_count: int
    encoding: str  # "columns" or "json-rows"


def schema_digest(schema: pa.Schema) -> str:
    """sha256 of Arrow's serialized form of ``schema``."""
    return sha256_hex(schema.serialize().to_pybytes())


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _columnar(rows: Sequence[Mapping[str, Any]]) -> pa.Table | None:
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    try:
        arrays = [pa.array([row.get(key) for row in rows]) for key in keys]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        return None
    return pa.Table.from_arrays(arrays, names=list(keys)) if keys else None


def _json_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    column = pa.array([canonical_json(row) for row in rows], type=pa.utf8())
    schema = pa.schema([pa.field("row", pa.utf8())], metadata={ENCODING_KEY: JSON_ROWS})
    return pa.Table.from_arrays([column], schema=schema)


def rows_to_ipc(rows: Sequence[Mapping[str, Any]]) -> ArrowWindow:
    """Serialize a row window; the columnar form when it round-trips exactly, JSON rows otherwise."""
    if not all(isinstance(row, Mapping) for row in rows):
        raise TypeError("a row window is a list of JSON objects")
    table = _columnar(rows)
    if table is not None and len(rows) > 0:
        data = _stream(table)
        if table_rows(pa.ipc.open_stream(data).read_all()) == [dict(row) for row in _normalized(rows)]:
            return ArrowWindow(data, schema_digest(table.schema), len(rows), "columns")
    table = _json_table(rows)
    return ArrowWindow(_stream(table), schema_digest(table.schema), len(rows), "json-rows")


def _normalized(rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    normalized: list[Any] = json.loads(canonical_json(list(rows)))
    return normalized


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of a table written by :func:`rows_to_ipc`."""
    metadata = table.schema.metadata or {}
    if metadata.get(ENCODING_KEY) == JSON_ROWS:
        return [json.loads(text) for text in table.column("row").to_pylist()]
    return [dict(row) for row in table.to_pylist()]


def ipc_to_rows(data: bytes | Iterable[bytes]) -> list[dict[str, Any]]:
    """The rows of an Arrow IPC stream written by :func:`rows_to_ipc`."""
    raw = data if isinstance(data, bytes) else b"".join(data)
    return table_rows(pa.ipc.open_stream(pa.BufferReader(raw)).read_all())


def store_rows(
    store: PayloadStore, rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Write a row window as Arrow IPC to ``store``; its durable ``rows_ref`` (JSON form)."""
    window = rows_to_ipc(rows)
    ref = store.store(
        window.data,
        ARROW_STREAM,
        {"schema_digest": window.schema_digest, "row_count": str(window.row_count), **(metadata or {})},
    )
    return {
        "uri": ref.uri,
        "sha256": ref.sha256,
        "media_type": ARROW_STREAM,
        "size_bytes": ref.size_bytes,
        "byte_length": ref.size_bytes,
        "row_count": window.row_count,
        "schema_digest": window.schema_digest,
        "compression": "none",
        "encoding": window.encoding,
    }


def load_rows(store: PayloadStore, rows_ref: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows a ``rows_ref`` points at, read (streamed) from the durable store."""
    return ipc_to_rows(store.open(as_reference(rows_ref)))
