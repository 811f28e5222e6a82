"""What a worker sends the orchestrator: the body of ``POST /api/events`` and of claims and heartbeats."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: The events a worker may report for a command run; everything else is the control plane's to emit.
WORKER_EVENTS = frozenset({"task.started", "task.done", "ctx.patched"})
MAX_REPORTED_EVENTS = 10_000
MAX_NEXT_SLOTS = 32  # commands one report may take back for the worker's free threads


class ReportedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_type: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime | None = None


class PatchOp(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: Literal["add", "replace", "remove"]
    path: str = Field(pattern=r"^/[^/]*$", max_length=1024)
    value: Any = None


class WorkerReport(BaseModel):
    """The body of ``POST /api/events``: one command run's outcome."""

    model_config = ConfigDict(extra="forbid")
    command_id: str = Field(pattern=r"^[0-9]{1,19}$")
    worker_id: str = Field(min_length=1, max_length=256)
    attempt: int = Field(ge=1)
    started_at: datetime | None = None
    status: Literal["ok", "error"]
    result: Any = None
    error: dict[str, Any] | None = None
    ctx_patch: list[PatchOp] = Field(default_factory=list, max_length=MAX_REPORTED_EVENTS)
    events: list[ReportedEvent] = Field(default_factory=list, max_length=MAX_REPORTED_EVENTS)
    # Eager dispatch: the worker will run the next commands itself. The answer's ``next`` holds up to
    # ``next_slots`` of them, already claimed for it (no Pub/Sub hop): first the one command this report
    # issued when it issued exactly one, then the oldest commands waiting in the execution's pool.
    accept_next: bool = False
    next_slots: int = Field(default=1, ge=1, le=MAX_NEXT_SLOTS)
    # The worker holds this command's workload: the command this report issued, of the same execution,
    # is handed back without it (its ``scope`` has no ``workload``; the worker puts in the one it holds).
    has_workload: bool = False


class WorkerRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker_id: str = Field(min_length=1, max_length=256)
