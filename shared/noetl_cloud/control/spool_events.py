"""``POST /api/internal/spool/events``: the spool's events into the canonical event log.

The roles that spool (ingress, spool drainer, subscription runtime) hold no database connection;
they send their §8.4 events here. Each event carries an idempotency key; the event log keeps one
event per key, so a retried or re-flushed event is answered as a duplicate and never written
twice. ``event_time`` is the caller's (a ``spooled`` event written late by the drainer keeps the
item's spool time). Payloads are metadata only: ids, sizes, digests, ``noetl://spool/`` references.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from noetl_cloud.control.event_models import SpoolEventIn, SpoolEventsIn
from noetl_cloud.envelope import EventFactory
from noetl_cloud.eventlog.port import append_each_once
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.web import json_body


class SpoolEventService:
    def __init__(self, store: PostgresEventStore, events: EventFactory) -> None:
        self.store = store
        self.events = events

    def record(self, events: list[SpoolEventIn]) -> tuple[int, int]:
        """Append each event unless its idempotency key is already in the log: ``(recorded, duplicates)``."""
        return append_each_once(
            self.store,
            (
                self.events.new(
                    event.event_type,
                    stream_id=f"{'spool' if event.aggregate == 'subscription' else 'circuit'}/{event.subject}",
                    aggregate_type=event.aggregate,
                    aggregate_id=event.subject,
                    payload=event.payload,
                    idempotency_key=event.idempotency_key,
                    event_time=event.event_time,
                )
                for event in events
            ),
        )


def blueprint(service: Any) -> Blueprint:
    """The route, over a lazily built :class:`SpoolEventService` (``service()`` returns it)."""
    bp = Blueprint("spool_events", __name__)

    @bp.post("/api/internal/spool/events")
    def record_spool_events() -> tuple[dict[str, Any], int]:
        body = json_body(SpoolEventsIn)
        recorded, duplicates = service().record(body.events)
        return {"recorded": recorded, "duplicates": duplicates}, 200

    return bp
