"""The control plane's side of cursor loops (docs/frames.md): a cursor loop step run opens one stage.

When a ``mode: cursor`` step fires, the orchestrator opens its stage (the row and ``stage.opened``, in the
turn's transaction) and runs the loop as ``max_in_flight`` worker *slots*: iteration commands whose item
is ``{stage_id, slot, slots}``. Each slot's worker claims frames of the stage until none is left, so the
loop ends (``loop.done`` or ``step.failed``) when every slot has reported; the frames role closes the stage
when its last frame commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noetl_cloud.engine.model import StepPlan
from noetl_cloud.frames.service import stage_opened_payload, stage_row

if TYPE_CHECKING:
    from noetl_cloud.control.orchestrator import Turn


def open_cursor_stage(turn: Turn, plan: StepPlan, step_run_id: str) -> list[dict[str, Any]]:
    """Open the stage of a cursor loop step run in ``turn``; the slot items of its iteration commands."""
    loop = plan.loop
    assert loop is not None and loop.frame is not None
    state = turn.state
    stage_id = turn.orch.ids.next_id()
    loop_event_id = turn.last  # the step run's step.started
    opened = turn.emit(
        "stage.opened",
        {**stage_opened_payload(stage_id, "loop", plan.name, loop.frame, None), "step_run_id": step_run_id},
        aggregate_type="stage",
        aggregate_id=str(stage_id),
        key=turn.key("stage", stage_id, "opened"),
    )
    turn.new_stages.append(
        stage_row(
            stage_id,
            int(state.execution_id),
            state.tenant_id,
            state.organization_id,
            plan.name,
            loop.frame,
            opened_event_id=int(opened.event_id),
            dsl_ref=f"catalog/{state.catalog_id}/workflow/{plan.name}",
            step_run_id=int(step_run_id),
            loop_event_id=loop_event_id,
        )
    )
    slots = loop.max_in_flight or 1
    return [{"stage_id": str(stage_id), "slot": slot, "slots": slots} for slot in range(slots)]
