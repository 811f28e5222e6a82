"""The reducers of the ``commands`` and ``loops`` surfaces.

* ``commands`` — ``command.issued|claimed|started|completed|failed``, the task events of a run;
* ``loops`` — one row per loop run: iterations issued, completed, failed, in flight (its end is
  :mod:`~noetl_cloud.replay.reducers_execution`'s).

Pure, like every reducer (:mod:`~noetl_cloud.replay.reducers`): the state and one event in, the state changed.
"""

from __future__ import annotations

from typing import Any

from noetl_cloud.replay.state import Reducer, ReplayState, Row
from noetl_cloud.replay.upcasters import Event


def new_loop(run: str, step: Any) -> Row:
    return {
        "id": run,
        "step": step,
        "status": "running",
        "issued": 0,
        "completed": 0,
        "failed": 0,
        "in_flight": 0,
        "closed_event_id": None,
    }


def command_issued(state: ReplayState, event: Event) -> None:
    p = event["payload"]
    cid = str(p.get("command_id") or event["aggregate_id"])
    rows = state.surfaces["commands"]
    row = rows.get(cid)
    attempt = int(p.get("attempt") or 1)
    if row is None:
        row = rows[cid] = {
            "id": cid,
            "step": p.get("step"),
            "kind": p.get("kind", "step"),
            "step_run_id": None if p.get("step_run_id") is None else str(p["step_run_id"]),
            "iteration": p.get("iteration"),
            "execution_pool": p.get("execution_pool"),
            "attempt": attempt,
            "status": "issued",
            "worker_id": None,
            "issued_event_id": str(event["event_id"]),
            "terminal_event_id": None,
            "error": None,
            "reissues": 0,
            "task_events": 0,
        }
        run = row["step_run_id"]
        if row["kind"] == "iteration" and run is not None:
            loops = state.surfaces["loops"]
            loop = loops.get(run)
            if loop is None:
                loop = loops[run] = new_loop(run, row["step"])
            loop["issued"] += 1
            loop["in_flight"] += 1
        return
    row.update(
        attempt=attempt,
        status="issued",
        worker_id=None,
        issued_event_id=str(event["event_id"]),
        reissues=row["reissues"] + 1,
    )


def command_progress(status: str) -> Reducer:
    def reduce(state: ReplayState, event: Event) -> None:
        p = event["payload"]
        row = state.surfaces["commands"].get(str(p.get("command_id") or event["aggregate_id"]))
        if row is None or row["status"] in ("completed", "failed"):
            return
        row["status"] = status
        if p.get("worker_id") is not None:
            row["worker_id"] = p["worker_id"]
        if p.get("attempt") is not None:
            row["attempt"] = int(p["attempt"])

    return reduce


def command_ended(status: str) -> Reducer:
    def reduce(state: ReplayState, event: Event) -> None:
        p = event["payload"]
        row = state.surfaces["commands"].get(str(p.get("command_id") or event["aggregate_id"]))
        if row is None or row["status"] in ("completed", "failed"):
            return
        row.update(status=status, terminal_event_id=str(event["event_id"]), error=p.get("error"))
        if p.get("worker_id") is not None:
            row["worker_id"] = p["worker_id"]
        if row["kind"] == "iteration" and row["step_run_id"] is not None:
            loop = state.surfaces["loops"].get(row["step_run_id"])
            if loop is not None:
                loop[status] += 1
                loop["in_flight"] -= 1

    return reduce


def task_event(state: ReplayState, event: Event) -> None:
    command_id = (event.get("meta") or {}).get("command_id")
    if command_id is None:
        return
    row = state.surfaces["commands"].get(str(command_id))
    if row is not None:
        row["task_events"] += 1
