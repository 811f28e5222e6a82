"""The frame policy of a cursor loop (``loop.spec.frame``, spec §5.2): how much work one frame holds,
how long its lease runs, and how it is retried. ``max_rows`` is what a frame claims; ``max_bytes`` and
``max_seconds`` bound what it takes of them, when its cursor can give the rest back (``cursor.release``,
:mod:`noetl_cloud.frames.cursor`; docs/frames.md, Frame bounds). Defaults keep one-row behaviour (``max_rows: 1``,
``process: row``) until a playbook opts into batching.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FramePolicy(BaseModel):
    """``loop.spec.frame``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_rows: int = Field(default=1, ge=1, le=10_000)
    max_seconds: float = Field(default=30.0, gt=0, le=86_400)
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=2**34)
    lease_seconds: float = Field(default=120.0, gt=0, le=3600)
    heartbeat_seconds: float = Field(default=30.0, gt=0, le=3600)
    process: Literal["row", "frame"] = "row"
    retry_mode: Literal["whole_frame"] = "whole_frame"
    max_attempts: int = Field(default=3, ge=1, le=100)

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> FramePolicy:
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError("heartbeat_seconds must be shorter than lease_seconds")
        return self

    def heartbeat_interval(self, lease_seconds: float | None = None) -> float:
        """Seconds between heartbeats: ``heartbeat_seconds``, at most a third of the lease."""
        lease = lease_seconds if lease_seconds is not None else self.lease_seconds
        return min(self.heartbeat_seconds, lease / 3)
