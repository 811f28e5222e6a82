"""Row shapes and values the frame service's modules share: the stage row and the payload of
``stage.opened`` (also written by the orchestrator's cursor loops, ``control/turn.py``), the frame
statuses, the frame columns the claim, commit and reaper queries select, and bind-value helpers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from noetl_cloud.envelope import canonical_json
from noetl_cloud.frames.policy import FramePolicy

OPEN = ("PENDING", "CLAIMED", "RUNNING")
TERMINAL = ("COMMITTED", "FAILED")
EXECUTION_ENDED = ("completed", "failed", "cancelled")

FRAME_COLUMNS = (
    "f.frame_id, f.stage_id, f.execution_id, f.frame_index, f.status, f.owner_worker, f.lease_until, "
    "f.attempts, f.heartbeats, f.cursor, f.claimed_event_id, f.terminal_event_id, f.parent_frame_id, f.command_id"
)


def as_json(value: Any) -> str:
    return canonical_json(value)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def stage_opened_payload(
    stage_id: int, kind: str, step_name: str, policy: FramePolicy, frame_limit: int | None
) -> dict[str, Any]:
    """The payload of ``stage.opened``."""
    return {
        "stage_id": str(stage_id),
        "kind": kind,
        "step_name": step_name,
        "frame_policy": policy.model_dump(mode="json"),
        "frame_limit": frame_limit,
    }


def stage_row(
    stage_id: int,
    execution_id: int,
    tenant_id: str,
    organization_id: str,
    step_name: str,
    policy: FramePolicy,
    *,
    opened_event_id: int,
    kind: str = "loop",
    dsl_ref: str | None = None,
    step_run_id: int | None = None,
    frame_limit: int | None = None,
    loop_event_id: str | None = None,
) -> dict[str, Any]:
    """A new stage row (inserted in the transaction that writes its ``stage.opened``)."""
    return {
        "stage_id": stage_id,
        "execution_id": execution_id,
        "tenant_id": tenant_id,
        "organization_id": organization_id,
        "parent_event_id": int(loop_event_id) if loop_event_id else None,
        "loop_event_id": loop_event_id,
        "opened_event_id": opened_event_id,
        "kind": kind,
        "step_name": step_name,
        "dsl_ref": dsl_ref or f"workflow/{step_name}",
        "step_run_id": step_run_id,
        "frame_policy": policy.model_dump(mode="json"),
        "frame_limit": frame_limit,
    }
