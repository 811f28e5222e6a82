"""Request and answer shapes of the spool drainer's API: ``POST /drain`` (:mod:`noetl_cloud.spool.app`) and
the operators' ``/api/spool/*`` (:mod:`noetl_cloud.spool.routes`).

Shapes only: this module imports nothing of :mod:`noetl_cloud.web` nor of the role apps, so the routes and
the OpenAPI registry (:mod:`noetl_cloud.openapi.contracts`, which the app factory serves) both import them
from here without a cycle.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

MAX_PAGE: Final = 500

_PATH = Field(min_length=1, max_length=512)
_LANE = Field(default=None, min_length=1, max_length=512)


class SubscriptionsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subscription: str | None = Field(default=None, min_length=1, max_length=512)


class DeadLettersQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subscription: str = _PATH
    lane: str | None = _LANE
    reason: str | None = Field(default=None, min_length=1, max_length=128)
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    after: str | None = Field(default=None, min_length=1, max_length=2048)


class ResendOne(BaseModel):
    """One dead letter, by the name the dead-letter listing shows."""

    model_config = ConfigDict(extra="forbid")
    subscription: str = _PATH
    name: str = Field(min_length=1, max_length=2048)


class ResendAll(BaseModel):
    """Every dead letter of a subscription, or those of one lane and/or one reason."""

    model_config = ConfigDict(extra="forbid")
    subscription: str = _PATH
    lane: str | None = _LANE
    reason: str | None = Field(default=None, min_length=1, max_length=128)


class DrainOne(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subscription: str = _PATH


class LaneView(BaseModel):
    lane: str
    items: int
    bytes: int
    capped: bool = Field(description="the lane holds at least this many items (the listing stopped there)")
    oldest_spooled_at: str | None
    oldest_age_s: float | None


class SpoolSubscription(BaseModel):
    subscription: str
    registered: bool
    mode: str | None
    ordering: str | None
    items: int
    bytes: int
    lanes: list[LaneView]
    dead_letters: dict[str, Any]
    circuit: dict[str, Any] | None
    backlog: bool
    halted: dict[str, Any] | None


class SpoolSubscriptions(BaseModel):
    items: list[SpoolSubscription]


class DeadLetter(BaseModel):
    name: str
    lane: str
    recv_seq: str
    message_id: str
    attempts: int
    bytes: int
    spooled_at: str
    reason: str | None
    playbook: str | None


class DeadLetterPage(BaseModel):
    subscription: str
    items: list[DeadLetter]
    next: str | None = Field(description="pass as after= for the next page; null on the last")


class Resent(BaseModel):
    subscription: str
    name: str
    live_name: str
    drain: str


class ResendOperation(BaseModel):
    operation_id: str
    kind: str
    subscription: str
    filter: dict[str, str | None]
    state: str = Field(description="running, draining, done or failed")
    matched: int | None
    resent: int
    failed: int
    errors: list[dict[str, str | None]]
    drain: list[dict[str, Any]] | None
    started_at: str
    updated_at: str
    finished_at: str | None


class DrainResults(BaseModel):
    results: list[dict[str, Any]]


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subscription: str | None = Field(default=None, min_length=1, max_length=512)
    resume: bool = False
