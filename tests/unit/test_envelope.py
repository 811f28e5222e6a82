from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from noetl_cloud.envelope import EventEnvelope, EventFactory, canonical_json, checksum, format_time

GOLDEN = json.loads((Path(__file__).parent.parent / "data" / "envelope_golden.json").read_text())


def golden() -> EventEnvelope:
    return EventEnvelope(**GOLDEN["envelope"])


def test_golden_envelope_checksum_is_pinned() -> None:
    envelope = golden()
    assert canonical_json(envelope.canonical_fields()) == GOLDEN["canonical_json"]
    assert envelope.compute_checksum() == GOLDEN["envelope_checksum"]
    assert hashlib.sha256(GOLDEN["canonical_json"].encode()).hexdigest() == GOLDEN["envelope_checksum"]


def test_checksum_ignores_key_order_and_time_zone_of_the_input() -> None:
    source = dict(reversed(list(GOLDEN["envelope"].items())))
    source["event_time"] = "2026-05-16T07:34:56.789-05:00"
    assert EventEnvelope(**source).compute_checksum() == GOLDEN["envelope_checksum"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("stream_version", 4),
        ("payload", {"row_count": 51, "status": "COMPLETED", "note": "naïve ✓"}),
        ("meta", {}),
        ("idempotency_key", "other"),
        ("event_time", "2026-05-16T12:34:56.790Z"),
    ],
)
def test_any_field_change_changes_the_checksum(field: str, value: object) -> None:
    changed = EventEnvelope(**{**GOLDEN["envelope"], field: value})
    assert changed.compute_checksum() != GOLDEN["envelope_checksum"]


def test_canonical_json_form() -> None:
    text = canonical_json({"b": 1, "a": [True, None, "é"], "t": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)})
    assert text == '{"a":[true,null,"é"],"b":1,"t":"2026-01-02T03:04:05.000006Z"}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError):
        canonical_json({"x": b"raw"})
    assert checksum({"a": 1, "b": 2}) == checksum({"b": 2, "a": 1})


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValueError):
        format_time(datetime(2026, 1, 1))
    with pytest.raises(ValidationError):
        EventEnvelope(**{**GOLDEN["envelope"], "event_time": "2026-05-16T12:34:56"})


def test_sealed_sets_version_ingest_time_and_a_verifiable_checksum() -> None:
    draft = golden().model_copy(update={"envelope_checksum": None, "stream_version": 0})
    ingest = datetime(2026, 5, 16, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    sealed = draft.sealed(stream_version=9, ingest_time=ingest)
    assert sealed.stream_version == 9 and sealed.ingest_time == ingest.astimezone(UTC)
    assert sealed.verify_checksum()
    assert not sealed.model_copy(update={"meta": {"tampered": True}}).verify_checksum()


def test_envelope_rejects_malformed_fields() -> None:
    for field, value in [("event_id", "abc"), ("event_type", "NoDots"), ("tenant_id", ""), ("execution_id", "-1")]:
        with pytest.raises(ValidationError):
            EventEnvelope(**{**GOLDEN["envelope"], field: value})
    with pytest.raises(ValidationError):
        EventEnvelope(**{**GOLDEN["envelope"], "unknown_field": 1})


def test_event_factory_fills_scope_ids_and_schema_name() -> None:
    ids = iter(range(100, 200))
    factory = EventFactory(tenant_id="t", organization_id="o", producer="noetl://p", next_id=lambda: next(ids))
    event = factory.new(
        "playbook.started",
        stream_id="execution/5",
        aggregate_type="execution",
        aggregate_id="5",
        execution_id="5",
        payload={"path": "x"},
    )
    assert (event.event_id, event.tenant_id, event.organization_id) == ("100", "t", "o")
    assert event.schema_name == "noetl.playbook.started" and event.correlation_id == "5"
    assert event.event_time.tzinfo is not None
