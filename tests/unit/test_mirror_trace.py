"""The events mirror (eventlog/outbox.py) carries the writer's span, so the projector's fold joins the
trace of the request that wrote the events; with tracing off it carries nothing of the kind."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

from noetl_cloud import telemetry
from noetl_cloud.envelope import EventEnvelope, EventFactory
from noetl_cloud.eventlog.outbox import mirror_messages
from noetl_cloud.settings import Settings

EVENTS = EventFactory(tenant_id="t", organization_id="o", producer="test", next_id=count(100).__next__)


def _sealed() -> list[EventEnvelope]:
    draft = EVENTS.new(
        "step.started", stream_id="execution/7", aggregate_type="execution", aggregate_id="7", execution_id="7"
    )
    return [draft.sealed(stream_version=1, ingest_time=draft.event_time)]


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[None]:
    telemetry.configure(Settings(tracing="local", telemetry_dir=str(tmp_path)), "test")
    yield
    telemetry.shutdown()


def test_a_mirror_written_inside_a_span_names_that_span_as_its_parent(traced: None) -> None:
    with telemetry.span("POST /api/events"):
        own = telemetry.current_trace_dict()
        (message,) = mirror_messages(_sealed(), "noetl-events")
    assert own is not None and message["attributes"]["traceparent"] == own["traceparent"]
    assert message["attributes"]["event_type"] == "step.started"


def test_without_tracing_a_mirror_carries_no_trace() -> None:
    telemetry.shutdown()
    (message,) = mirror_messages(_sealed(), "noetl-events")
    assert set(message["attributes"]) == {"event_type", "tenant_id", "organization_id"}
