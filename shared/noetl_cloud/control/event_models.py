"""Request shapes of the control plane's event endpoints: the subscription runtime's own events
(:mod:`~noetl_cloud.control.runtime_events`) and the spool's (:mod:`~noetl_cloud.control.spool_events`).

Shapes only, like :mod:`~noetl_cloud.control.models`: nothing of :mod:`noetl_cloud.web` nor of the role
apps is imported here, so the routes and the OpenAPI registry both import them without a cycle.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

# -- POST /api/internal/subscriptions/{id}/events --------------------------------------------------------


class RuntimeEventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_type: str = Field(min_length=1, max_length=128)
    payload: dict[str, Any]
    idempotency_key: str = Field(min_length=1, max_length=400)
    event_time: AwareDatetime


class RuntimeEventsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[RuntimeEventIn] = Field(min_length=1, max_length=100)


# -- POST /api/internal/spool/events ---------------------------------------------------------------------

EventType = Literal[
    "subscription.message.spooled",
    "subscription.message.replayed",
    "subscription.message.dead_lettered",
    "subscription.message.dropped",
    "subscription.message.resent",
    "subscription.spool.draining",
    "subscription.spool.recovered",
    "subscription.spool.alert",
    "subscription.circuit.opened",
    "subscription.circuit.closed",
]


class SpoolEventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_type: EventType
    aggregate: Literal["subscription", "circuit"]
    subject: str = Field(min_length=1, max_length=512)
    payload: dict[str, Any] = Field(max_length=32)
    idempotency_key: str = Field(min_length=1, max_length=512)
    event_time: AwareDatetime


class SpoolEventsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[SpoolEventIn] = Field(min_length=1, max_length=500)
