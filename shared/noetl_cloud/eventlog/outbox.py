"""The outbox messages that mirror appended events to the events topic (shared by every adapter).

One message per execution (or, for events of no execution, per stream) per append, naming the last
event the append wrote there: its consumer, the projector, folds every event of the execution after
its tracking position up to the tip whatever event a delivery names, so one notification per write
is all it needs, and a write of six events costs one outbox row, not six.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from noetl_cloud import telemetry
from noetl_cloud.envelope import EventEnvelope


def outbox_message(envelope: EventEnvelope, topic: str, events: int = 1) -> dict[str, Any]:
    """The outbox row that mirrors ``envelope`` (the last of ``events`` appended together) to ``topic``.

    With tracing on, it carries the writer's span as its ``traceparent`` attribute (the relay publishes
    later, from a thread with no span of its own), so the projector's fold joins the trace of the request
    that wrote the events (docs/observability.md)."""
    attributes = {
        "event_type": envelope.event_type,
        "tenant_id": envelope.tenant_id,
        "organization_id": envelope.organization_id,
    }
    trace = telemetry.current_trace_dict()
    if trace is not None:
        attributes.update(trace)
    return {
        "event_id": int(envelope.event_id),
        "topic": topic,
        "ordering_key": envelope.execution_id or envelope.stream_id,
        "attributes": attributes,
        "data": {"event_id": envelope.event_id, "execution_id": envelope.execution_id, "events": events},
    }


def mirror_messages(sealed: Sequence[EventEnvelope], topic: str) -> list[dict[str, Any]]:
    """The outbox rows of one append: one per execution (or stream), for its last event, in the order
    those last events were written."""
    last: dict[str, tuple[int, EventEnvelope, int]] = {}
    for position, envelope in enumerate(sealed):
        key = envelope.execution_id or envelope.stream_id
        count = last[key][2] + 1 if key in last else 1
        last[key] = (position, envelope, count)
    return [outbox_message(envelope, topic, count) for _p, envelope, count in sorted(last.values(), key=lambda t: t[0])]
