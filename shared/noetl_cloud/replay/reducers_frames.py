"""The reducers of frames: the ``stages`` of frames (spec §5.1) and the ``frames`` surface.

* ``stages`` — one row per frame stage (``stage.opened`` → ``stage.closed``);
* ``frames`` — ``frame.created|dispatched|claimed|started|heartbeat|committed|failed|abandoned``.

Pure, like every reducer (:mod:`~noetl_cloud.replay.reducers`): the state and one event in, the state changed.
"""

from __future__ import annotations

from noetl_cloud.replay.state import ReplayState, Row
from noetl_cloud.replay.upcasters import Event

# -- stages of frames (spec §5.1) -----------------------------------------------------------------


def stage_opened(state: ReplayState, event: Event) -> None:
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


def stage_closed(state: ReplayState, event: Event) -> None:
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


def frame_event(state: ReplayState, event: Event) -> None:
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
