"""Bodies of the frames API (docs/frames.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from noetl_cloud.frames.errors import IpcWithoutDurableRef

SNOWFLAKE = r"^[0-9]{1,19}$"
DURABLE_KEYS = ("ref", "uri", "locator")


class ClaimTerms(BaseModel):
    """What a claim asks for. Alone, the ``claim`` of a commit (spec §5.3: a commit "may immediately
    hand the worker the next frame"): a claim of the committed frames' stage by the same worker."""

    model_config = ConfigDict(extra="forbid")
    command_id: str | None = Field(default=None, pattern=SNOWFLAKE)
    requested_count: int = Field(default=1, ge=1, le=100)
    lease_seconds: float | None = Field(default=None, gt=0, le=3600)
    cursor: dict[str, Any] = Field(default_factory=dict)
    locality: dict[str, Any] | None = None

    def request(self, worker_id: str) -> ClaimRequest:
        return ClaimRequest(worker_id=worker_id, **self.model_dump(exclude_none=True))


class ClaimRequest(ClaimTerms):
    """``POST /api/stages/{stage_id}/frames/claim``."""

    worker_id: str = Field(min_length=1, max_length=256)
    frame_policy: dict[str, Any] | None = None


class HeartbeatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker_id: str = Field(min_length=1, max_length=256)
    lease_seconds: float | None = Field(default=None, gt=0, le=3600)
    status: Literal["RUNNING"] | None = None


class FrameOutcome(BaseModel):
    """How one frame's attempt ended: what a commit says about its frame."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["COMPLETED", "FAILED"]
    cursor: dict[str, Any] = Field(default_factory=dict)
    row_count: int = Field(default=0, ge=0)
    output_ref: dict[str, Any] | None = None
    events_emitted: int = Field(default=0, ge=0)
    error: dict[str, Any] | None = None

    def check_durable(self) -> None:
        """Refuse an IPC hint that is the only copy (it is swept with shared memory, so unreplayable)."""
        if self.output_ref is not None and not _durable(self.output_ref):
            raise IpcWithoutDurableRef(
                "output_ref carries an IPC hint without a durable ref, uri or locator",
                details={"field": "output_ref"},
            )


class CommitRequest(FrameOutcome):
    """``POST /api/frames/{id}/commit``; with ``claim``, the answer also leases the next frames."""

    worker_id: str = Field(min_length=1, max_length=256)
    claim: ClaimTerms | None = None


class FrameCommit(FrameOutcome):
    """One frame of a batch commit."""

    frame_id: str = Field(pattern=SNOWFLAKE)


class BatchCommitRequest(BaseModel):
    """``POST /api/stages/{stage_id}/frames/commit``: the attempts of many frames of one stage, ended in
    one transaction; each frame is answered on its own (a conflict on one does not undo the others)."""

    model_config = ConfigDict(extra="forbid")
    worker_id: str = Field(min_length=1, max_length=256)
    commits: list[FrameCommit] = Field(min_length=1, max_length=100)
    claim: ClaimTerms | None = None

    @model_validator(mode="after")
    def _distinct(self) -> BatchCommitRequest:
        ids = [c.frame_id for c in self.commits]
        if len(set(ids)) != len(ids):
            raise ValueError("a frame is committed twice in one batch")
        return self


def _durable(ref: Any) -> bool:
    """Every object in ``ref`` that carries an ``ipc`` hint also carries a durable key, itself or in an
    object nested in it (a ``rows_ref``)."""
    if isinstance(ref, list):
        return all(_durable(item) for item in ref)
    if not isinstance(ref, dict):
        return True
    if ref.get("ipc") is not None and not _has_durable(ref):
        return False
    return all(_durable(value) for key, value in ref.items() if key != "ipc")


def _has_durable(ref: Any) -> bool:
    if isinstance(ref, list):
        return any(_has_durable(item) for item in ref)
    if not isinstance(ref, dict):
        return False
    if any(isinstance(ref.get(key), str) and ref.get(key) for key in DURABLE_KEYS):
        return True
    return any(_has_durable(value) for key, value in ref.items() if key != "ipc")
