"""The form reducers read: an event as a plain dict (the envelope's JSON form plus its store ``position``).

Reading 100,000 events must not build 100,000 pydantic models: the Postgres reader maps rows
straight to these dicts, with the same canonical text for timestamps and ids the envelope uses.
"""

from __future__ import annotations

from typing import Any

from noetl_cloud.envelope import EventEnvelope, format_time
from noetl_cloud.eventlog.stored import envelope_fields
from noetl_cloud.replay.upcasters import Event


def from_envelope(envelope: EventEnvelope, position: int) -> Event:
    """An envelope (as the event store seals it) at its store position."""
    data = envelope.model_dump(mode="json", exclude={"envelope_checksum"})
    data["position"] = position
    return data


def from_row(m: Any) -> Event:
    """A row of the ``event`` table (a mapping of its columns, as stored: noetl_cloud.eventlog.stored)."""
    stored = envelope_fields(m)
    return {
        "position": int(m["position"]),
        "event_id": str(m["event_id"]),
        "tenant_id": m["tenant_id"],
        "organization_id": m["organization_id"],
        "execution_id": None if m["execution_id"] is None else str(m["execution_id"]),
        "stream_id": stored["stream_id"],
        "stream_version": int(m["stream_version"]),
        "aggregate_id": stored["aggregate_id"],
        "aggregate_type": m["aggregate_type"],
        "event_type": m["event_type"],
        "schema_name": stored["schema_name"],
        "schema_version": int(m["schema_version"]),
        "event_time": format_time(m["event_time"]),
        "ingest_time": format_time(m["ingest_time"]),
        "causation_id": stored["causation_id"],
        "correlation_id": stored["correlation_id"],
        "idempotency_key": stored["idempotency_key"],
        "producer": stored["producer"],
        "payload": m["payload"] or {},
        "payload_ref": m["payload_ref"],
        "meta": m["meta"] or {},
    }
