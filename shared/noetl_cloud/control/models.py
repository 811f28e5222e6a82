"""Request and result shapes of the control-plane API.

Shapes only: this module imports nothing of :mod:`noetl_cloud.web` nor of the role apps, so the routes
(:mod:`~noetl_cloud.control.app`, :mod:`~noetl_cloud.control.bulk_reruns`, ...) and the OpenAPI registry
(:mod:`noetl_cloud.openapi.contracts`, which the app factory serves) both import them from here without
a cycle. The event endpoints' shapes are in :mod:`~noetl_cloud.control.event_models`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

SNOWFLAKE = r"^[0-9]{1,19}$"
MAX_BATCH = 1000
MAX_DEDUP_WINDOW_S = 7 * 24 * 3600
#: ``max`` of a bulk re-run (``POST /api/executions/reruns``): its default and its bound.
DEFAULT_MAX, MAX_MAX = 100, 1000


class TraceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    traceparent: str | None = Field(default=None, max_length=256)
    tracestate: str | None = Field(default=None, max_length=512)
    baggage: str | None = Field(default=None, max_length=8192)


class DedupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=512)
    window_secs: int = Field(default=3600, ge=1, le=MAX_DEDUP_WINDOW_S)


class ExecuteRequest(BaseModel):
    """One execution: a playbook by path (optionally a version) or by catalog id."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    path: str | None = Field(default=None, min_length=1, max_length=512)
    catalog_id: str | None = Field(default=None, pattern=SNOWFLAKE)
    version: int | None = Field(default=None, ge=1)
    workload: dict[str, Any] = Field(default_factory=dict, validation_alias=AliasChoices("workload", "payload"))
    parent_execution_id: str | None = Field(default=None, pattern=SNOWFLAKE)
    execution_pool: str | None = Field(default=None, min_length=1, max_length=64)
    trace: TraceIn | None = None
    dedup: DedupIn | None = None
    #: The id of the delivery this start answers (the ingress's replay protection): a second start
    #: with the same key and parent within the window is a ``duplicate`` and records nothing.
    delivery: DedupIn | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_target(self) -> ExecuteRequest:
        if (self.path is None) == (self.catalog_id is None):
            raise ValueError("give exactly one of path or catalog_id")
        if self.catalog_id is not None and self.version is not None:
            raise ValueError("version goes with path; a catalog_id names one version already")
        return self


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    executions: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH)


class ItemResult(BaseModel):
    """One item's outcome; an error item keeps the exception a single request answers with."""

    index: int
    status: Literal["started", "duplicate", "error"]
    execution_id: str | None = None
    execution_pool: str | None = None
    error: dict[str, Any] | None = None
    _exception: Any = PrivateAttr(default=None)

    @classmethod
    def failed(cls, index: int, exc: Any) -> ItemResult:
        result = cls(index=index, status="error", error=exc.to_dict())
        result._exception = exc
        return result

    @property
    def exception(self) -> Any:
        return self._exception

    def public(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


# -- subscriptions, executions and the ingress's audit (noetl_cloud.control.app) --------------------------


class RegisterSubscription(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=512)


class Transition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_version: int | None = Field(default=None, ge=1)


class AuditPayload(BaseModel):
    """What an ingress verdict may record: codes and counts, never a body, header or secret."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$")
    status: int | None = Field(default=None, ge=100, le=599)
    suppressed: int | None = Field(default=None, ge=0)
    message_id: str | None = Field(default=None, max_length=512)
    detail: str | None = Field(default=None, max_length=512)


class Audit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_type: Literal["subscription.message.rejected", "subscription.message.dead_lettered"]
    payload: AuditPayload


class Cancel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=1024)


# -- bulk re-run (noetl_cloud.control.bulk_reruns) -------------------------------------------------------


class BulkRerun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filter: dict[str, str] = Field(default_factory=dict)
    max: int = Field(default=DEFAULT_MAX, ge=1, le=MAX_MAX)
    idempotency_key: str | None = Field(default=None, max_length=128)
