"""The worker's side of cursor loops (docs/frames.md): one slot command claims and runs frames until none is left.

For each frame leased to it the slot:

1. heartbeats at once (``CLAIMED → RUNNING``: ``frame.started``), then from a thread every
   ``heartbeat_seconds`` (at most a third of the lease) until the frame is committed; a heartbeat answered
   409/404 means the lease is gone, and the frame is dropped before its next task attempt, uncommitted
   (:mod:`~noetl_cloud.frames.heartbeat`);
2. claims the frame's rows with the cursor driver: the ``postgres`` tool runs ``loop.cursor.claim`` (its
   ``{{ __frame_max_rows }}``, ``{{ __frame_id }}``, ``{{ __frame_index }}``, ``{{ __frame_attempt }}``
   rendered; ``params`` rendered with the step's scope and bound). A claim SQL that tags the rows it takes
   with ``__frame_id`` and re-selects rows already tagged with it gives a retried frame (``whole_frame``)
   the same rows again;
3. runs the step's pipeline once per row (``process: row``: ``iter.<iterator>`` is the row, ``iter.index``
   its place in the frame) or once per frame (``process: frame``: ``frame.rows``, ``frame.row_count``,
   ``frame.index`` and ``iter.<iterator>_rows``) (:mod:`~noetl_cloud.frames.process`);
4. writes the rows as Arrow IPC to the payload store (when one is configured) and commits the frame with
   its ``rows_ref``, row count, cursor and the number of pipeline events it produced: one event per frame.

**Bounds.** When the cursor declares ``release``, a frame stops taking rows at ``max_bytes`` (the rows
taken, serialized as JSON, would pass it) or ``max_seconds`` (measured on the slot's clock from the frame's
start, checked before each row in ``process: row``); the first row is always taken
(:mod:`~noetl_cloud.frames.process`). The rows it did not take go back to the cursor through ``release``
(bound as ``:rows``, a JSON array) before the commit, which carries only the rows taken; the next frame
claims them. Without ``release`` the bounds are refused when the playbook is compiled, so a frame takes
every row it claimed.

A frame with fewer rows than ``max_rows`` exhausts the cursor (its commit says so and the stage stops
minting). A failed frame is committed ``FAILED`` and the slot goes on with the next; the slot reports
``error`` (kind ``frame_failed``, the first failure) once no frame is left, so the loop ends ``step.failed``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from noetl_cloud.engine.model import Loop, StepPlan
from noetl_cloud.engine.outcome import Clock, Outcome, SystemClock, ToolResolver
from noetl_cloud.engine.pipeline import StepContext
from noetl_cloud.engine.state import CtxStore
from noetl_cloud.engine.templates import Renderer
from noetl_cloud.envelope import utc_now
from noetl_cloud.frames.cursor import FrameBounds, run_statement
from noetl_cloud.frames.heartbeat import FrameBeat
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.process import SlotEvents, process_rows
from noetl_cloud.web.client import ApiResponse, UpstreamUnavailable, segment
from noetl_cloud.worker.port import ControlPlaneApi, error_code
from noetl_cloud.worker.run import PlanCache, Report

if TYPE_CHECKING:
    from noetl_cloud.payload.port import PayloadStore

log = logging.getLogger(__name__)

_COMMIT_PAUSE_S = 0.5


def cursor_plan(command: Mapping[str, Any], plans: PlanCache) -> StepPlan | None:
    """The step plan when ``command`` is a slot of a cursor loop, else ``None`` (also for a bad document)."""
    if command.get("kind") != "iteration":
        return None
    playbook = command.get("playbook")
    if not isinstance(playbook, Mapping) or not isinstance(playbook.get("document"), Mapping):
        return None
    try:
        catalog_id = str(playbook.get("catalog_id") or "") or None
        plan = plans.plans(catalog_id, playbook["document"]).get(str(command.get("step")))
    except Exception:  # noqa: BLE001 - a bad document is run_command's to report
        return None
    return plan if plan is not None and plan.loop is not None and plan.loop.mode == "cursor" else None


@dataclass
class SlotSummary:
    stage_id: str
    slot: int
    frames: int = 0
    rows: int = 0
    failed: int = 0
    lost: int = 0
    events: int = 0
    first_error: dict[str, Any] | None = None
    claims: int = 0
    frame_ids: list[str] = field(default_factory=list)

    def result(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id,
            "slot": self.slot,
            "frames": self.frames,
            "rows": self.rows,
            "failed": self.failed,
            "lost": self.lost,
            "claims": self.claims,
        }


class CursorSlot:
    """Runs one slot command of a cursor loop against the frames API."""

    def __init__(
        self,
        frames: ControlPlaneApi,
        *,
        worker_id: str,
        tools: ToolResolver,
        payloads: PayloadStore | None = None,
        clock: Clock | None = None,
        renderer: Renderer | None = None,
        keychain: Mapping[str, Any] | None = None,
        run_child: Callable[..., Outcome] | None = None,
        now: Callable[[], datetime] = utc_now,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.frames = frames
        self.worker_id = worker_id
        self.tools = tools
        self.payloads = payloads
        self.clock = clock or SystemClock()
        self.renderer = renderer or Renderer()
        self.keychain = keychain or {}
        self.run_child = run_child
        self.now = now
        self.stop = stop or (lambda: False)

    # -- the slot -------------------------------------------------------------------------------

    def run(self, command: Mapping[str, Any], plan: StepPlan) -> Report:
        started_at = self.now()
        loop = plan.loop
        assert loop is not None and loop.frame is not None
        item = (command.get("iteration") or {}).get("item") or {}
        stage_id, slot = str(item.get("stage_id") or ""), item.get("slot")
        if not stage_id.isdigit() or not isinstance(slot, int):
            return Report(started_at, "error", None, {"kind": "bad_command", "message": "a slot names its stage"})
        scope = command.get("scope") or {}
        events = SlotEvents()
        sc = StepContext(
            execution_id=str(command["execution_id"]),
            step=plan.name,
            step_run_id=str(command.get("step_run_id") or command["command_id"]),
            workload=scope.get("workload") or {},
            ctx=CtxStore(dict(scope.get("ctx") or {})),
            args=scope.get("args") or {},
            tools=self.tools,
            renderer=self.renderer,
            clock=self.clock,
            emit=events,
            next_id=_local_ids(f"{command['command_id']}-slot{slot}"),
            keychain=self.keychain,
            run_child=self.run_child,
        )
        summary = SlotSummary(stage_id, slot)
        policy = loop.frame
        claim = {
            "requested_count": 1,
            "lease_seconds": policy.lease_seconds,
            "cursor": {"slot": slot},
            "command_id": str(command["command_id"]),
        }
        handed: list[Mapping[str, Any]] = []  # frames a commit leased to this slot with its answer
        while not self.stop():
            if not handed:
                answer = self._call(
                    f"/api/stages/{segment(stage_id)}/frames/claim",
                    {"worker_id": self.worker_id, **claim, "frame_policy": policy.model_dump(mode="json")},
                )
                summary.claims += 1
                if answer.status in (404, 409):  # the stage closed (or is gone): this slot is done
                    break
                if not answer.ok or not isinstance(answer.json, dict):
                    summary.first_error = summary.first_error or {
                        "kind": "claim_refused",
                        "message": f"the frames API answered {answer.status}",
                        "code": error_code(answer),
                    }
                    break
                handed = list(answer.json.get("frames") or [])
                if not handed:
                    break
            frame = handed.pop(0)
            handed += self._frame(sc, plan, loop, policy, frame, events, summary, None if handed else claim)
        if self.stop():
            return Report(
                started_at, "error", None, {"kind": "stopped", "message": "the run was stopped"}, stopped=True
            )
        result = summary.result()
        if summary.first_error is not None:
            error = {**summary.first_error, "iteration": slot}
            return Report(started_at, "error", result, error, events.ctx_patch)
        return Report(started_at, "ok", result, None, events.ctx_patch)

    def _call(self, path: str, body: Any) -> ApiResponse:
        response = self.frames.post(path, body)
        if response.status >= 500 or response.status in (401, 403):
            raise UpstreamUnavailable(
                f"the frames API answered {response.status}", details={"path": path, "status": response.status}
            )
        return response

    # -- one frame ------------------------------------------------------------------------------

    def _frame(
        self,
        sc: StepContext,
        plan: StepPlan,
        loop: Loop,
        policy: FramePolicy,
        frame: Mapping[str, Any],
        events: SlotEvents,
        summary: SlotSummary,
        next_claim: dict[str, Any] | None = None,
    ) -> list[Mapping[str, Any]]:
        """Run one frame and commit it; the frames the commit leased to this slot with its answer
        (``next_claim``: the commit also claims, saving the slot a request per frame)."""
        fid = str(frame["frame_id"])
        lease = float(policy.lease_seconds)
        first = self._call(
            f"/api/frames/{segment(fid)}/heartbeat", {"worker_id": self.worker_id, "lease_seconds": lease}
        )
        if not first.ok:
            summary.lost += 1
            return []
        lost = threading.Event()
        beat = FrameBeat(self.frames, self.worker_id, fid, lease, policy.heartbeat_interval(lease), lost)
        beat.start()
        before = events.count
        started = time.monotonic()
        bounds = FrameBounds(policy, self.clock, enforced=bool((loop.cursor or {}).get("release")))
        released = 0
        try:
            claimed, failure = self._claim_rows(sc, loop, policy, frame)
            rows = claimed
            if failure is None:
                stop = lambda: lost.is_set() or self.stop()  # noqa: E731
                failure, taken = process_rows(sc, plan, loop, policy, frame, claimed, stop, bounds)
                rows = claimed[:taken]
                if failure is None and taken < len(claimed) and not (lost.is_set() or self.stop()):
                    released = len(claimed) - taken
                    failure = self._release(sc, loop, frame, claimed[taken:])
        finally:
            beat.stop()
        if lost.is_set() or self.stop():
            summary.lost += 1
            return []
        rows_ref = None
        if self.payloads is not None and rows:
            from noetl_cloud.payload.arrow import store_rows  # pyarrow only where frames write rows

            rows_ref = store_rows(
                self.payloads, rows, {"frame_id": fid, "stage_id": str(frame.get("stage_id", summary.stage_id))}
            )
        # Fewer rows than asked for: the cursor is empty, unless this frame gave rows back (a bound cut it).
        exhausted = len(claimed) < policy.max_rows and not released
        body = {
            "worker_id": self.worker_id,
            "status": "COMPLETED" if failure is None else "FAILED",
            "cursor": {
                "slot": summary.slot,
                "frame_index": frame.get("frame_index"),
                "attempt": frame.get("attempt"),
                "exhausted": exhausted,
            },
            "row_count": len(rows),
            "output_ref": {
                **({"rows_ref": rows_ref} if rows_ref is not None else {}),
                "metrics": {
                    "process": policy.process,
                    "ms": round((time.monotonic() - started) * 1000, 3),
                    **({"bound": bounds.hit, "released": released} if bounds.hit else {}),
                },
            },
            "events_emitted": events.count - before,
            "error": failure,
        }
        if next_claim is not None and not exhausted:
            body["claim"] = next_claim
            summary.claims += 1  # a claim folded into the commit's request: counted as a claim still
        committed = self._commit(fid, body, beat)
        if not committed.ok:  # 409: the lease went to another worker meanwhile, who commits the frame
            summary.lost += 1
            return []
        summary.frames += 1
        summary.events += events.count - before
        summary.frame_ids.append(fid)
        if failure is None:
            summary.rows += len(rows)
        else:
            summary.failed += 1
            summary.first_error = summary.first_error or {"kind": "frame_failed", "frame_id": fid, "error": failure}
        handed = committed.json.get("frames") if isinstance(committed.json, dict) else None
        return list(handed or [])

    def _commit(self, fid: str, body: dict[str, Any], beat: FrameBeat) -> ApiResponse:
        """Commit the frame, retried while its lease still holds: a frames API that is away for a moment
        (its instance restarted mid-frame) costs no second attempt of the frame's work. Once the lease
        may have run out the failure is raised, and the frame reaper hands the frame to a new attempt."""
        path = f"/api/frames/{segment(fid)}/commit"
        while True:
            try:
                return self._call(path, body)
            except UpstreamUnavailable:
                if self.stop() or time.monotonic() + _COMMIT_PAUSE_S >= beat.holds_until():
                    raise
                log.warning("frame commit failed: the frames API is unreachable; retrying", extra={"frame_id": fid})
                time.sleep(_COMMIT_PAUSE_S)

    def _claim_rows(
        self, sc: StepContext, loop: Loop, policy: FramePolicy, frame: Mapping[str, Any]
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The frame's rows from the cursor driver, or the failure that kept it from claiming them."""
        result, failure = run_statement(
            self.tools, self.renderer, sc, loop, frame, statement="claim", max_rows=policy.max_rows
        )
        if failure is not None:
            return [], failure
        rows = result.get("rows") if isinstance(result, dict) else None
        if not isinstance(rows, list):
            return [], {"kind": "cursor_no_rows", "message": "the cursor claim returned no row set", "task": "cursor"}
        return rows, None

    def _release(
        self, sc: StepContext, loop: Loop, frame: Mapping[str, Any], rows: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Give the rows a bounded frame did not take back to the cursor; the failure, or ``None``."""
        _, failure = run_statement(
            self.tools, self.renderer, sc, loop, frame, statement="release", max_rows=len(rows), rows=rows
        )
        return failure


def _local_ids(prefix: str) -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def run_cursor_slot(
    command: Mapping[str, Any],
    plan: StepPlan,
    *,
    frames: ControlPlaneApi,
    worker_id: str,
    tools: ToolResolver,
    payloads: PayloadStore | None = None,
    **options: Any,
) -> Report:
    """Run one slot command of a cursor loop; its report (``result``: the slot's frame and row counts)."""
    return CursorSlot(frames, worker_id=worker_id, tools=tools, payloads=payloads, **options).run(command, plan)


__all__ = ["CursorSlot", "SlotSummary", "cursor_plan", "run_cursor_slot"]
