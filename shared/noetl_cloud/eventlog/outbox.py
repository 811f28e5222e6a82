"""The outbox message that mirrors an event to the events topic (shared by every adapter)."""

from __future__ import annotations

from typing import Any

from noetl_cloud.envelope import EventEnvelope


def outbox_message(envelope: EventEnvelope, topic: str) -> dict[str, Any]:
    """The outbox row that mirrors an event to the events topic."""
    return {
        "event_id": int(envelope.event_id),
        "topic": topic,
        "ordering_key": envelope.execution_id or envelope.stream_id,
        "attributes": {
            "event_type": envelope.event_type,
            "tenant_id": envelope.tenant_id,
            "organization_id": envelope.organization_id,
        },
        "data": {"event_id": envelope.event_id, "execution_id": envelope.execution_id},
    }
