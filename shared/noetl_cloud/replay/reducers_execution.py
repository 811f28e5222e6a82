"""The reducers of the ``execution`` surface and of step runs: how an execution's row and its steps' rows change.

* ``execution`` — one row: ``playbook.started|completed|failed``, ``execution.cancelled``, each
  step's last result (``step.done``, ``loop.done``, ``step.failed``), token counters;
* ``stages`` — one row per step run (``step.started`` → ``step.done|loop.done|step.failed``);
* ``loops`` — the end of a loop run (``loop.done``, ``step.failed``; its iterations are
  :mod:`~noetl_cloud.replay.reducers_commands`).

Pure, like every reducer (:mod:`~noetl_cloud.replay.reducers`): the state and one event in, the state changed.
"""

from __future__ import annotations

from typing import Any

from noetl_cloud.replay.reducers_commands import new_loop
from noetl_cloud.replay.state import Reducer, ReplayState, Row
from noetl_cloud.replay.upcasters import Event


def _execution(state: ReplayState, event: Event) -> Row:
    rows = state.surfaces["execution"]
    eid = str(event["execution_id"])
    row = rows.get(eid)
    if row is None:
        row = rows[eid] = {
            "id": eid,
            "status": "unknown",
            "path": None,
            "version": None,
            "catalog_id": None,
            "entry_step": None,
            "execution_pool": None,
            "parent_execution_id": None,
            "workload": {},
            "results": {},
            "error": None,
            "cancel_reason": None,
            "started_at": None,
            "ended_at": None,
            "started_event_id": None,
            "ended_event_id": None,
            "steps_started": 0,
            "steps_ended": 0,
            "steps_denied": 0,
            "arcs_selected": 0,
        }
    return row


def playbook_started(state: ReplayState, event: Event) -> None:
    row = _execution(state, event)
    p, meta = event["payload"], event.get("meta") or {}
    row.update(
        status="running",
        path=p.get("path"),
        version=p.get("version"),
        catalog_id=p.get("catalog_id"),
        entry_step=p.get("entry_step"),
        workload=p.get("workload") or {},
        execution_pool=meta.get("execution_pool"),
        parent_execution_id=meta.get("parent_execution_id"),
        started_at=event["event_time"],
        started_event_id=str(event["event_id"]),
    )


def ended(status: str) -> Reducer:
    def reduce(state: ReplayState, event: Event) -> None:
        row = _execution(state, event)
        p = event["payload"]
        row.update(status=status, ended_at=event["event_time"], ended_event_id=str(event["event_id"]))
        if status == "failed":
            row["error"] = p.get("error")
        elif status == "cancelled":
            row["cancel_reason"] = p.get("reason")

    return reduce


def step_started(state: ReplayState, event: Event) -> None:
    p = event["payload"]
    _execution(state, event)["steps_started"] += 1
    run = p.get("step_run_id")
    if run is None:
        return
    state.surfaces["stages"][str(run)] = {
        "id": str(run),
        "kind": "step_run",
        "step": p.get("step"),
        "args": p.get("args") or {},
        "status": "started",
        "result_status": None,
        "parent_stage_id": None,
        "opened_event_id": str(event["event_id"]),
        "closed_event_id": None,
        "opened_at": event["event_time"],
        "closed_at": None,
    }


def step_denied(state: ReplayState, event: Event) -> None:
    _execution(state, event)["steps_denied"] += 1


def step_ended(state: ReplayState, event: Event) -> None:
    p = event["payload"]
    row = _execution(state, event)
    row["steps_ended"] += 1
    step = p.get("step")
    if step is not None:
        row["results"] = {**row["results"], str(step): _result(p)}
    run = p.get("step_run_id")
    if run is None:
        return
    run = str(run)
    failed = event["event_type"] == "step.failed"
    stage = state.surfaces["stages"].get(run)
    if stage is not None:
        stage.update(
            status="failed" if failed else "done",
            result_status=p.get("status"),
            closed_event_id=str(event["event_id"]),
            closed_at=event["event_time"],
        )
    loops = state.surfaces["loops"]
    if event["event_type"] == "loop.done" and run not in loops:  # an empty loop issues no iteration
        loops[run] = new_loop(run, step)
    loop = loops.get(run)
    if loop is not None:
        loop.update(status="failed" if failed else "done", closed_event_id=str(event["event_id"]))


def _result(payload: dict[str, Any]) -> Any:
    if "reference" in payload:
        return {"reference": payload["reference"], "context": payload.get("context")}
    return payload.get("result")


def next_selected(state: ReplayState, event: Event) -> None:
    _execution(state, event)["arcs_selected"] += 1
