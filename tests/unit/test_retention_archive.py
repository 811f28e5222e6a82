"""The archive codec and the partition arithmetic of retention (no database)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from noetl_cloud.errors import NotFound
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.replay.archived import cut
from noetl_cloud.replay.events import from_row
from noetl_cloud.retention import archive, partitions

AT = datetime(2026, 11, 25, 12, 30, 1, 123456, tzinfo=UTC)


def _row(position: int, **extra: Any) -> dict[str, Any]:
    return {
        "position": position,
        "event_id": 1000 + position,
        "tenant_id": "acme",
        "organization_id": "ops",
        "execution_id": 42,
        "stream_id": "execution/42",
        "stream_version": position,
        "aggregate_id": "42",
        "aggregate_type": "execution",
        "event_type": "step.done",
        "schema_name": "noetl.step.done",
        "schema_version": 1,
        "event_time": AT + timedelta(seconds=position),
        "ingest_time": AT + timedelta(seconds=position),
        "producer": "noetl://test",
        "causation_id": None,
        "correlation_id": "c",
        "idempotency_key": None,
        "payload": {"result": [1, "é", {"n": None}], "big": 2**60},
        "payload_ref": None,
        "meta": {},
        "envelope_checksum": "x" * 64,
        **extra,
    }


def test_an_archive_decodes_to_the_rows_replay_folds_exactly() -> None:
    rows = [_row(1), _row(2, payload_ref={"uri": "noetl://a", "sha256": "0" * 64}, idempotency_key="k")]
    decoded = archive.decode(archive.encode(rows))
    assert [from_row(r) for r in decoded] == [from_row(r) for r in rows]
    assert decoded[0]["event_time"] == rows[0]["event_time"]  # microseconds, UTC


def test_cut_resolves_the_three_cutoffs_like_the_live_path() -> None:
    rows = [_row(p) for p in (3, 5, 9)]
    by_id = SimpleNamespace(event_id=1005, position=None, time=None)
    assert [e["position"] for e in cut(rows, by_id, "42")[0]] == [3, 5]
    by_position = SimpleNamespace(event_id=None, position=8, time=None)
    assert cut(rows, by_position, "42")[1] == 8
    by_time = SimpleNamespace(event_id=None, position=None, time=AT + timedelta(seconds=5))
    assert cut(rows, by_time, "42")[1] == 5
    with pytest.raises(NotFound):
        cut(rows, SimpleNamespace(event_id=7, position=None, time=None), "42")


def test_a_days_partition_holds_exactly_the_snowflakes_minted_that_day() -> None:
    day = partitions.day_start(AT)
    lo, hi = partitions.first_id(day), partitions.first_id(day + timedelta(days=1))
    minted = SnowflakeGenerator(node_id=5, clock=lambda: int(AT.timestamp() * 1000)).next_id()
    assert lo <= minted < hi
    assert partitions.id_time(lo) == day and partitions.id_time(hi) == day + timedelta(days=1)
    assert partitions.daily_name("event", AT) == "event_p20261125"


def test_rows_as_stored_since_0012_archive_and_replay_like_the_rows_before_it() -> None:
    """A checksum stored as bytes is archived as its hex; the fields a row leaves out (NULL) fold as what
    they stand for; an archive written before 0012 (every field whole) decodes to the same rows."""
    full = _row(1, envelope_checksum="ab" * 32, aggregate_id="42", correlation_id="42")
    compact = _row(
        1, envelope_checksum=bytes.fromhex("ab" * 32), schema_name=None, aggregate_id=None, correlation_id=None
    )
    (decoded,) = archive.decode(archive.encode([compact]))
    assert decoded["envelope_checksum"] == "ab" * 32
    assert from_row(decoded) == from_row(full)
    assert (from_row(decoded)["schema_name"], from_row(decoded)["aggregate_id"]) == ("noetl.step.done", "42")

    old = _row(2, correlation_id=None)  # no correlation, though it has an execution: whole, as before 0012
    sink = io.BytesIO()  # an archive as encode() wrote it before 0012: no form in its metadata
    pq.write_table(pa.table({n: [_plain(old[n], n)] for n in archive.COLUMNS}, schema=archive.SCHEMA), sink)
    (was,) = archive.decode(sink.getvalue())
    event = from_row(was)
    assert (event["correlation_id"], event["aggregate_id"], event["schema_name"]) == (None, "42", "noetl.step.done")
    rest = {k: v for k, v in from_row(old).items() if k != "correlation_id"}
    assert {k: v for k, v in event.items() if k != "correlation_id"} == rest


def test_an_archive_of_form_0012_reads_its_whole_stream_and_causation_ids_into_todays_form() -> None:
    """Form 0012 kept the stream and causation ids whole; decoded, they are in the form migration 0018
    stores (relative to the execution and to the row's own id) and replay reads the same envelope."""
    whole = _row(3, causation_id="1002", stream_id="execution/42/stage/1/frame/2")
    sink = io.BytesIO()
    metadata = {b"noetl.event_row": b"0012"}
    table = pa.table({n: [_plain(whole[n], n)] for n in archive.COLUMNS}, schema=archive.SCHEMA.with_metadata(metadata))
    pq.write_table(table, sink)
    (was,) = archive.decode(sink.getvalue())
    assert (was["stream_id"], was["causation_id"]) == ("\x01/stage/1/frame/2", "\x011")
    assert from_row(was) == from_row(whole)
    assert (from_row(was)["stream_id"], from_row(was)["causation_id"]) == ("execution/42/stage/1/frame/2", "1002")


def _plain(value: Any, name: str) -> Any:
    return json.dumps(value) if name in ("payload", "payload_ref", "meta") and value is not None else value
