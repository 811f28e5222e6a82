"""``POST /api/internal/subscriptions/{id}/events``: the subscription runtime's own events.

The runtime holds no database connection; the few events it observes itself (today
``subscription.rate_limited``, RFC §9: the start of each limiting episode) come here and are
appended to the stream ``subscription/<id>/runtime`` (aggregate: the subscription). Not to
``subscription/<id>``: that stream is the lifecycle trail, whose version is the subscription row's
version for the compare-and-set of every transition (:mod:`~noetl_cloud.control.lifecycle`).

Only the event types in :data:`PAYLOADS` are accepted, each with its payload's schema (an unknown
type is 422 ``unknown_event_type``). Each event carries the caller's idempotency key; the log keeps
one event per key, so a retried post is answered as a duplicate and written once. The key is
stored as ``subscription/<id>/runtime/<key>``: the log's keys are unique across every stream, and a
caller's key must not be able to take the place of another stream's event.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from noetl_cloud.control.event_models import RuntimeEventIn, RuntimeEventsIn
from noetl_cloud.control.lifecycle import SubscriptionService
from noetl_cloud.envelope import EventFactory
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.eventlog.port import append_each_once
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.web import json_body
from noetl_cloud.web.errors import validation_details


class RateLimitedPayload(BaseModel):
    """``subscription.rate_limited``: what the runtime's rate governor saw when limiting started."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=512)
    max_dispatch_per_sec: float = Field(gt=0)
    wait_s: float = Field(ge=0)
    held: int = Field(ge=0)
    instance: str = Field(min_length=1, max_length=256)


#: The event types a runtime may write, each with the schema of its payload.
PAYLOADS: dict[str, type[BaseModel]] = {"subscription.rate_limited": RateLimitedPayload}


class RuntimeEventService:
    def __init__(self, subscriptions: SubscriptionService, store: PostgresEventStore, events: EventFactory) -> None:
        self.subscriptions = subscriptions
        self.store = store
        self.events = events

    def record(self, subscription_id: int, events: list[RuntimeEventIn]) -> tuple[int, int]:
        """Append each event unless its key is already in the log: ``(recorded, duplicates)``.

        The whole request is validated first (nothing is written when one event is invalid);
        an unknown subscription (of this tenant) is 404 ``subscription_not_found``.
        """
        payloads = [self._payload(i, event) for i, event in enumerate(events)]
        view = self.subscriptions.get(subscription_id)
        for i, payload in enumerate(payloads):
            if payload.get("path", view["path"]) != view["path"]:
                raise ValidationFailed(
                    f"event {i} names another subscription's path",
                    code="subscription_path_mismatch",
                    details={"index": i, "path": view["path"]},
                )
        sid = str(subscription_id)
        stream = f"subscription/{sid}/runtime"
        return append_each_once(
            self.store,
            (
                self.events.new(
                    event.event_type,
                    stream_id=stream,
                    aggregate_type="subscription",
                    aggregate_id=sid,
                    payload=payload,
                    idempotency_key=f"{stream}/{event.idempotency_key}",
                    event_time=event.event_time,
                )
                for event, payload in zip(events, payloads, strict=True)
            ),
        )

    @staticmethod
    def _payload(index: int, event: RuntimeEventIn) -> dict[str, Any]:
        schema = PAYLOADS.get(event.event_type)
        if schema is None:
            raise ValidationFailed(
                f"event {index}: a runtime may not write this event type",
                code="unknown_event_type",
                details={"index": index, "allowed": sorted(PAYLOADS)},
            )
        try:
            return schema.model_validate(event.payload).model_dump(mode="json")
        except ValidationError as exc:
            details = [{**d, "field": f"events.{index}.payload.{d['field']}"} for d in validation_details(exc)]
            raise ValidationFailed(
                f"event {index}: invalid payload", code="invalid_event_payload", details=details
            ) from None


def blueprint(service: Any) -> Blueprint:
    """The route, over a lazily built :class:`RuntimeEventService` (``service()`` returns it)."""
    bp = Blueprint("runtime_events", __name__)

    @bp.post("/api/internal/subscriptions/<int:subscription_id>/events")
    def record_runtime_events(subscription_id: int) -> tuple[dict[str, Any], int]:
        body = json_body(RuntimeEventsIn)
        recorded, duplicates = service().record(subscription_id, body.events)
        return {"recorded": recorded, "duplicates": duplicates}, 200

    return bp
