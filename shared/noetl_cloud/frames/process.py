"""Running a cursor loop step's pipeline over one frame's rows (docs/frames.md), on the worker.

:func:`process_rows` runs the pipeline once per row (``process: row``: ``iter.<iterator>`` is the row,
``iter.index`` its place in the frame) or once per frame (``process: frame``: ``frame.rows``,
``frame.row_count``, ``frame.index`` and ``iter.<iterator>_rows``), and says how many of the claimed rows
the frame took. ``stop`` is asked before each task attempt: a stopped frame is dropped, not committed.

**Bounds.** When the cursor declares ``release``, a frame stops taking rows at ``max_bytes`` (the rows
taken, serialized as JSON, would pass it) or ``max_seconds`` (measured on the slot's clock from the frame's
start, checked before each row in ``process: row``); the first row is always taken
(:class:`~noetl_cloud.frames.cursor.FrameBounds`). A failed frame keeps every row it claimed
(``whole_frame``).

:class:`SlotEvents` is the pipeline's ``emit`` for a slot: it counts the events (a frame's commit carries
how many it produced) and keeps the ``ctx`` patches (the slot's report carries those).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from noetl_cloud.engine.model import Loop, StepPlan
from noetl_cloud.engine.pipeline import StepContext, drive_until, run_pipeline
from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.frames.cursor import FrameBounds
from noetl_cloud.frames.policy import FramePolicy


class SlotEvents:
    """The pipeline's ``emit``: counts events and keeps the ``ctx`` patches (the report carries those)."""

    def __init__(self) -> None:
        self.count = 0
        self.ctx_patch: list[dict[str, Any]] = []

    def __call__(self, event_type: str, payload: dict[str, Any], *, meta: dict[str, Any] | None = None) -> Any:
        self.count += 1
        if event_type == "ctx.patched":
            self.ctx_patch.extend(payload.get("patch") or [])
        return cast(EventEnvelope, None)  # the engine never reads it back


def process_rows(
    sc: StepContext,
    plan: StepPlan,
    loop: Loop,
    policy: FramePolicy,
    frame: Mapping[str, Any],
    rows: list[dict[str, Any]],
    stop: Callable[[], bool],
    bounds: FrameBounds,
) -> tuple[dict[str, Any] | None, int]:
    """Run the pipeline per row or per frame over the rows ``bounds`` let the frame take; the first
    failure (or ``None``) and how many rows the frame took."""
    if policy.process == "frame" or not plan.tasks:
        rows = rows[: bounds.count(rows)]
        if not rows or not plan.tasks:
            return None, len(rows)
    info = {
        "id": str(frame["frame_id"]),
        "index": frame.get("frame_index"),
        "attempt": frame.get("attempt"),
        "row_count": len(rows),
    }
    writer = f"iteration {frame.get('frame_index')}"
    if policy.process == "frame":
        scope = {
            f"{loop.iterator}_rows": rows,
            "frame": {**info, "rows": rows},
            "index": frame.get("frame_index"),
        }
        result = drive_until(run_pipeline(sc, plan.tasks, scope, writer=writer), stop)
        return (None if result is None or result.status == "ok" else {**(result.error or {})}), len(rows)
    for index, row in enumerate(rows):
        if not bounds.take(row, index):
            return None, index
        scope = {loop.iterator: row, "index": index, "frame": info}
        result = drive_until(run_pipeline(sc, plan.tasks, scope, iteration=index, writer=writer), stop)
        if result is None:
            return None, index  # stopped: the frame is dropped, not committed
        if result.status != "ok":  # a failed frame keeps every row it claimed (whole_frame)
            return {**(result.error or {}), "row": index}, len(rows)
    return None, len(rows)
