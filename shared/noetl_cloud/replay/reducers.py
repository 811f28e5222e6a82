"""The reducers: pure functions folding an execution's events, in canonical order, into its surfaces.

Canonical order is the event store's ``position`` (commit order within a stream; the order replay
cuts at). Every reducer takes the state and one event (upcast already) and changes the state;
none reads a clock, a database or anything but its arguments, so a fold of the same events always
gives the same state and checksum — in the projector, in ``GET /api/replay/state`` and in tests.

Surfaces and the events that shape them:

* ``execution`` — one row: ``playbook.started|completed|failed``, ``execution.cancelled``, each
  step's last result (``step.done``, ``loop.done``, ``step.failed``), token counters;
* ``stages`` — one row per step run (``step.started`` → ``step.done|loop.done|step.failed``) and per
  frame stage (``stage.opened`` → ``stage.closed``, spec §5.1);
* ``frames`` — ``frame.created|dispatched|claimed|started|heartbeat|committed|failed|abandoned``;
* ``commands`` — ``command.issued|claimed|started|completed|failed``, the task events of a run;
* ``loops`` — one row per loop run: iterations issued, completed, failed, in flight, its end;
* ``business_objects`` — any event whose payload or meta carries
  ``business_object: {type, id, op?: upsert|delete, state?: {...}}``: the object's merged state.

Changing what a reducer writes changes checksums: bump :data:`REDUCER_VERSION` (snapshots and
projections of another version are then refolded) and re-pin ``tests/data/replay/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from noetl_cloud.replay.state import LINEAGE, ReplayState, Row
from noetl_cloud.replay.upcasters import Event, UpcasterRegistry

REDUCER_VERSION = 1

Reducer = Callable[[ReplayState, Event], None]


def fold(
    events: Iterable[Event],
    registry: UpcasterRegistry,
    state: ReplayState | None = None,
    *,
    snapshot_every: int = 0,
    on_snapshot: Callable[[ReplayState], None] | None = None,
) -> ReplayState:
    """Fold ``events`` (in canonical order) onto ``state`` (a new one when None).

    With ``snapshot_every`` > 0, ``on_snapshot`` sees the state each time its event count reaches a
    multiple of it (it must copy what it keeps: the state goes on changing).
    """
    state = state if state is not None else ReplayState()
    upcast = registry.upcast
    for raw in events:
        apply(state, upcast(raw))
        if snapshot_every > 0 and on_snapshot is not None and state.event_count % snapshot_every == 0:
            on_snapshot(state)
    return state


def apply(state: ReplayState, event: Event) -> None:
    """Fold one event."""
    reducer = _REDUCERS.get(event["event_type"])
    if reducer is not None:
        reducer(state, event)
    payload = event.get("payload") or {}
    meta = event.get("meta") or {}
    _lineage(state, event, payload)
    business = payload.get("business_object") or meta.get("business_object")
    if isinstance(business, dict):
        _business_object(state, event, business)
    state.event_count += 1
    state.last_event_id = str(event["event_id"])
    state.last_position = int(event["position"])


# -- execution -------------------------------------------------------------------------------------


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


def _playbook_started(state: ReplayState, event: Event) -> None:
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


def _ended(status: str) -> Reducer:
    def reduce(state: ReplayState, event: Event) -> None:
        row = _execution(state, event)
        p = event["payload"]
        row.update(status=status, ended_at=event["event_time"], ended_event_id=str(event["event_id"]))
        if status == "failed":
            row["error"] = p.get("error")
        elif status == "cancelled":
            row["cancel_reason"] = p.get("reason")

    return reduce


def _step_started(state: ReplayState, event: Event) -> None:
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


def _step_denied(state: ReplayState, event: Event) -> None:
    _execution(state, event)["steps_denied"] += 1


def _step_ended(state: ReplayState, event: Event) -> None:
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
        loops[run] = _new_loop(run, step)
    loop = loops.get(run)
    if loop is not None:
        loop.update(status="failed" if failed else "done", closed_event_id=str(event["event_id"]))


def _result(payload: dict[str, Any]) -> Any:
    if "reference" in payload:
        return {"reference": payload["reference"], "context": payload.get("context")}
    return payload.get("result")


def _next_selected(state: ReplayState, event: Event) -> None:
    _execution(state, event)["arcs_selected"] += 1


# -- stages of frames (spec §5.1) -----------------------------------------------------------------


def _stage_opened(state: ReplayState, event: Event) -> None:
    p = event["payload"]
    sid = str(p.get("stage_id") or event["aggregate_id"])
    state.surfaces["stages"][sid] = {
        "id": sid,
        "kind": p.get("kind", "loop"),
        "step": p.get("step_name") or p.get("step"),
        "args": {},
        "status": "OPEN",
        "result_status": None,
        "parent_stage_id": p.get("parent_stage_id"),
        "opened_event_id": str(event["event_id"]),
        "closed_event_id": None,
        "opened_at": event["event_time"],
        "closed_at": None,
    }


def _stage_closed(state: ReplayState, event: Event) -> None:
    p = event["payload"]
    sid = str(p.get("stage_id") or event["aggregate_id"])
    stage = state.surfaces["stages"].get(sid)
    if stage is not None:
        stage.update(
            status=p.get("status", "CLOSED"),
            result_status=p.get("status"),
            closed_event_id=str(event["event_id"]),
            closed_at=event["event_time"],
        )


# -- frames ------------------------------------------------------------------------------------------


def _frame(state: ReplayState, event: Event) -> Row:
    p = event["payload"]
    fid = str(p.get("frame_id") or event["aggregate_id"])
    rows = state.surfaces["frames"]
    row = rows.get(fid)
    if row is None:
        row = rows[fid] = {
            "id": fid,
            "stage_id": None if p.get("stage_id") is None else str(p["stage_id"]),
            "parent_frame_id": None if p.get("parent_frame_id") is None else str(p["parent_frame_id"]),
            "command_id": None if p.get("command_id") is None else str(p["command_id"]),
            "status": "PENDING",
            "owner_worker": None,
            "row_count": 0,
            "attempts": 0,
            "events": 0,
            "claimed_event_id": None,
            "terminal_event_id": None,
            "output_ref": None,
            "error": None,
        }
    row["events"] += 1
    return row


def _frame_event(state: ReplayState, event: Event) -> None:
    row = _frame(state, event)
    p = event["payload"]
    kind = event["event_type"].split(".", 1)[1]
    if kind in ("dispatched", "claimed"):
        row.update(
            status="CLAIMED",
            owner_worker=p.get("worker_id"),
            attempts=row["attempts"] + 1,
            claimed_event_id=str(event["event_id"]),
        )
    elif kind in ("started", "heartbeat"):
        row["status"] = "RUNNING"
    elif kind == "committed":
        row.update(
            status="COMMITTED",
            row_count=int(p.get("row_count") or 0),
            output_ref=event.get("payload_ref") or p.get("output_ref"),
            terminal_event_id=str(event["event_id"]),
        )
    elif kind == "failed":
        row.update(status="FAILED", error=p.get("error"), terminal_event_id=str(event["event_id"]))
    elif kind == "abandoned":
        row.update(status="PENDING", owner_worker=None)


# -- commands and loops ----------------------------------------------------------------------------


def _new_loop(run: str, step: Any) -> Row:
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


def _command_issued(state: ReplayState, event: Event) -> None:
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
                loop = loops[run] = _new_loop(run, row["step"])
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


def _command_progress(status: str) -> Reducer:
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


def _command_ended(status: str) -> Reducer:
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


def _task_event(state: ReplayState, event: Event) -> None:
    command_id = (event.get("meta") or {}).get("command_id")
    if command_id is None:
        return
    row = state.surfaces["commands"].get(str(command_id))
    if row is not None:
        row["task_events"] += 1


# -- business objects and lineage ------------------------------------------------------------------


def _business_object(state: ReplayState, event: Event, business: dict[str, Any]) -> None:
    kind, oid = business.get("type"), business.get("id")
    if not isinstance(kind, str) or oid is None:
        return
    key = f"{kind}/{oid}"
    rows = state.surfaces["business_objects"]
    row = rows.get(key)
    if row is None:
        row = rows[key] = {
            "id": key,
            "type": kind,
            "object_id": str(oid),
            "version": 0,
            "state": {},
            "deleted": False,
            "first_event_id": str(event["event_id"]),
            "last_event_id": None,
        }
    row["version"] += 1
    row["last_event_id"] = str(event["event_id"])
    if business.get("op") == "delete":
        row.update(state={}, deleted=True)
        return
    fields = business.get("state")
    row.update(state={**row["state"], **fields} if isinstance(fields, dict) else row["state"], deleted=False)


def _lineage(state: ReplayState, event: Event, payload: dict[str, Any]) -> None:
    """Record the payload references an event carries: the envelope's ``payload_ref`` and an inline
    result ``reference`` (data-plane reference-first)."""
    ref = event.get("payload_ref")
    if isinstance(ref, dict) and ref.get("uri"):
        _reference(state, event, ref["uri"], ref.get("sha256"), ref.get("size_bytes"), ref.get("media_type"))
    inline = payload.get("reference")
    if isinstance(inline, dict) and inline.get("ref"):
        _reference(state, event, inline["ref"], inline.get("checksum"), inline.get("size"), inline.get("kind"))


def _reference(state: ReplayState, event: Event, uri: Any, sha: Any, size: Any, media: Any) -> None:
    key = str(uri)
    if key not in state.payload_refs:
        state.payload_refs[key] = {
            "uri": key,
            "sha256": sha,
            "size_bytes": size,
            "media_type": media,
            "first_event_id": str(event["event_id"]),
        }


# -- which surfaces an event can change (the projector loads and writes only those) ---------------

_STEP_ENDED = ("execution", "stages", "loops")
_COMMAND_ENDED = ("commands", "loops")
_TOUCHES: dict[str, tuple[str, ...]] = {
    "playbook.started": ("execution",),
    "playbook.completed": ("execution",),
    "playbook.failed": ("execution",),
    "execution.cancelled": ("execution",),
    "step.started": ("execution", "stages"),
    "step.denied": ("execution",),
    "step.done": _STEP_ENDED,
    "loop.done": _STEP_ENDED,
    "step.failed": _STEP_ENDED,
    "next.selected": ("execution",),
    "stage.opened": ("stages",),
    "stage.closed": ("stages",),
    "command.issued": _COMMAND_ENDED,
    "command.claimed": ("commands",),
    "command.started": ("commands",),
    "command.completed": _COMMAND_ENDED,
    "command.failed": _COMMAND_ENDED,
    "task.started": ("commands",),
    "task.done": ("commands",),
    "ctx.patched": ("commands",),
    **{f"frame.{kind}": ("frames",) for kind in ("created", "dispatched", "claimed", "started", "heartbeat")},
    **{f"frame.{kind}": ("frames",) for kind in ("committed", "failed", "abandoned")},
}


def touches(event: Event) -> set[str]:
    """The surfaces (and ``payload_refs``, the lineage) folding ``event`` (upcast already) may change.
    Every reducer writes only within these; ``tests/unit/test_projector_touches.py`` holds them to it."""
    kinds = set(_TOUCHES.get(event["event_type"], ()))
    payload = event.get("payload") or {}
    meta = event.get("meta") or {}
    ref, inline = event.get("payload_ref"), payload.get("reference")
    if (isinstance(ref, dict) and ref.get("uri")) or (isinstance(inline, dict) and inline.get("ref")):
        kinds.add(LINEAGE)
    if isinstance(payload.get("business_object") or meta.get("business_object"), dict):
        kinds.add("business_objects")
    return kinds


_REDUCERS: dict[str, Reducer] = {
    "playbook.started": _playbook_started,
    "playbook.completed": _ended("completed"),
    "playbook.failed": _ended("failed"),
    "execution.cancelled": _ended("cancelled"),
    "step.started": _step_started,
    "step.denied": _step_denied,
    "step.done": _step_ended,
    "loop.done": _step_ended,
    "step.failed": _step_ended,
    "next.selected": _next_selected,
    "stage.opened": _stage_opened,
    "stage.closed": _stage_closed,
    "command.issued": _command_issued,
    "command.claimed": _command_progress("claimed"),
    "command.started": _command_progress("started"),
    "command.completed": _command_ended("completed"),
    "command.failed": _command_ended("failed"),
    "task.started": _task_event,
    "task.done": _task_event,
    "ctx.patched": _task_event,
    **{
        f"frame.{kind}": _frame_event
        for kind in ("created", "dispatched", "claimed", "started", "heartbeat", "committed", "failed", "abandoned")
    },
}
