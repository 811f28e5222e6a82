"""The pure part of the orchestrator: a :class:`Turn` folds one execution forward from an event.

It fires tokens (admission, ``step.started``, the commands a worker runs), folds command outcomes into
steps and loops, routes (§8) and ends the execution, collecting the rows to write; it opens no
connection. Its orchestrator is seen through :class:`TurnHost` (ids, event factory, renderer, limits
and the notification row), so this module does not import ``orchestrator.py``.

Cursor loops (docs/frames.md): when a ``mode: cursor`` step fires, the turn opens its stage (the row and
``stage.opened``, in the turn's transaction, :func:`open_cursor_stage`) and runs the loop as
``max_in_flight`` worker *slots*: iteration commands whose item is ``{stage_id, slot, slots}``. Each
slot's worker claims frames of the stage until none is left, so the loop ends (``loop.done`` or
``step.failed``) when every slot has reported; the frames role closes the stage when its last frame
commits.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from noetl_cloud.engine.model import StepPlan
from noetl_cloud.engine.routing import SUCCESS_EVENTS, admit, collection, route, template_error
from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope
from noetl_cloud.envelope import EventEnvelope, EventFactory
from noetl_cloud.frames.service import stage_opened_payload, stage_row
from noetl_cloud.ids import SnowflakeGenerator

OPEN = ("issued", "claimed", "started")
ENDED = ("completed", "failed", "cancelled")


@dataclass
class ExecState:
    """The token state of one execution, as stored on its row."""

    execution_id: str
    tenant_id: str
    organization_id: str
    pool: str
    path: str
    catalog_id: int | None
    trace: dict[str, Any] | None
    workload: dict[str, Any]
    ctx: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    tokens_fired: int = 0
    status: str = "started"
    error: dict[str, Any] | None = None
    version: int | None = None  # the playbook's catalog version
    parent_iter: Any = None  # meta.parent_iter of a child started inside a loop iteration
    subscription: str | None = None  # meta.subscription_path: the subscription that dispatched it
    probe: dict[str, str] | None = None  # meta.spool.probe: the downstream circuits it probes ({name: holder})

    @property
    def ended(self) -> bool:
        return self.status in ENDED


def apply_patch(ctx: dict[str, Any], ops: Sequence[dict[str, Any]]) -> None:
    """Apply top-level JSON-Patch ops (what ``set_ctx`` produces) to ``ctx`` in place."""
    for op in ops:
        key = _unescape(op["path"][1:])
        if op["op"] == "remove":
            ctx.pop(key, None)
        else:
            ctx[key] = copy.deepcopy(op.get("value"))


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class TurnHost(Protocol):
    """What a turn needs of its orchestrator (:class:`~noetl_cloud.control.orchestrator.Orchestrator`)."""

    #: Makes the turn's events.
    events: EventFactory
    #: Mints step run and command ids.
    ids: SnowflakeGenerator
    #: Renders admission rules, loop collections and arcs.
    renderer: Renderer
    #: The most tokens one execution may fire.
    max_tokens: int
    #: The attempts a new command gets.
    max_attempts: int

    def note(self, state: ExecState, command_id: str, event_id: str, step: str, attempt: int) -> dict[str, Any]:
        """The outbox row of a command notification on ``noetl-commands-<pool>``."""
        ...


class Turn:
    """Folds one execution forward and collects what to write: events, commands, loop runs, notifications.

    Tokens fire in FIFO order, as in the in-process runner: admission, ``step.started``, then either an
    immediate end (a denied token, an empty loop, a template failure) or the commands a worker runs.
    """

    def __init__(self, orch: TurnHost, state: ExecState, plans: dict[str, StepPlan]) -> None:
        self.orch = orch
        self.state = state
        self.plans = plans
        self.stream = f"execution/{state.execution_id}"
        self.head: int | None = None  # the stream's version read under the execution's lock, if it was
        self.events: list[EventEnvelope] = []
        self.commands: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.new_loops: dict[str, dict[str, Any]] = {}
        self.new_stages: list[dict[str, Any]] = []  # stages of cursor loops (docs/frames.md)
        self.changed_loops: dict[str, dict[str, Any]] = {}
        self.ended_commands: list[dict[str, Any]] = []  # the outcome of each command this turn ended
        self.queue: deque[tuple[str, dict[str, Any]]] = deque()
        self.failure: dict[str, Any] | None = None
        self.last: str | None = None

    # -- events ---------------------------------------------------------------------------------

    def key(self, *parts: object) -> str:
        s = self.state
        return "/".join([s.tenant_id, s.organization_id, s.execution_id, *map(str, parts)])

    def emit(
        self,
        event_type: str,
        payload: dict[str, Any],
        *,
        aggregate_type: str = "execution",
        aggregate_id: str | None = None,
        key: str | None = None,
        meta: dict[str, Any] | None = None,
        event_time: datetime | None = None,
    ) -> EventEnvelope:
        s = self.state
        trace_meta = {"trace": s.trace} if s.trace else {}
        event = self.orch.events.new(
            event_type,
            stream_id=self.stream,
            aggregate_type=aggregate_type,
            aggregate_id=aggregate_id or s.execution_id,
            execution_id=s.execution_id,
            payload=payload,
            meta={**trace_meta, **(meta or {})},
            causation_id=self.last,
            idempotency_key=key,
            event_time=event_time,
        )
        self.events.append(event)
        self.last = event.event_id
        return event

    # -- tokens ---------------------------------------------------------------------------------

    def fire(self, step: str, args: dict[str, Any]) -> None:
        """Admit one token and start its step run."""
        s = self.state
        s.tokens_fired += 1
        if s.tokens_fired > self.orch.max_tokens:
            self.fail({"kind": "token_limit", "message": f"more than {self.orch.max_tokens} tokens"})
            return
        plan = self.plans[step]
        renderer = self.orch.renderer
        scope = build_scope(workload=s.workload, ctx=s.ctx, args=args, token=args)
        step_run_id = self.orch.ids.next_str()
        try:
            allowed, rule = admit(renderer, plan, scope)
        except TemplateFailure as exc:
            self.emit("step.started", {"step": step, "step_run_id": step_run_id, "args": args})
            self.finish_step(plan, args, step_run_id, "step.failed", None, template_error(exc))
            return
        if not allowed:
            self.emit("step.denied", {"step": step, "args": args, "rule": rule})
            return
        self.emit("step.started", {"step": step, "step_run_id": step_run_id, "args": args})
        if plan.loop is None:
            self.issue(step, args, step_run_id, "step")
            return
        try:
            if plan.loop.mode == "cursor":  # its slots claim frames of a stage (docs/frames.md)
                items = open_cursor_stage(self, plan, step_run_id)
            else:
                items = collection(renderer, plan, scope)
        except TemplateFailure as exc:
            self.finish_step(plan, args, step_run_id, "step.failed", None, template_error(exc))
            return
        if not items:
            self.finish_step(plan, args, step_run_id, "loop.done", [], None)
            return
        parallel = plan.loop.mode in ("parallel", "cursor")
        loop = {
            "step_run_id": int(step_run_id),
            "execution_id": int(s.execution_id),
            "step": step,
            "args": args,
            "mode": "parallel" if parallel else "sequential",
            "max_in_flight": (plan.loop.max_in_flight or len(items)) if parallel else 1,
            "items": items,
            "next_index": 0,
            "in_flight": 0,
            "results": {},
            "ctx_owners": {},
            "failed_index": None,
            "error": None,
        }
        self.new_loops[step_run_id] = loop
        self.top_up(loop)

    def top_up(self, loop: dict[str, Any]) -> None:
        """Issue iteration commands while the loop has free slots and no failure."""
        items = loop["items"]
        while loop["failed_index"] is None and loop["in_flight"] < loop["max_in_flight"]:
            index = loop["next_index"]
            if index >= len(items):
                return
            self.issue(loop["step"], loop["args"], str(loop["step_run_id"]), "iteration", index, items[index])
            loop["next_index"] = index + 1
            loop["in_flight"] += 1

    def issue(
        self,
        step: str,
        args: dict[str, Any],
        step_run_id: str,
        kind: str,
        iteration: int | None = None,
        item: Any = None,
    ) -> None:
        s = self.state
        command_id = self.orch.ids.next_str()
        payload: dict[str, Any] = {
            "command_id": command_id,
            "step": step,
            "kind": kind,
            "step_run_id": step_run_id,
            "execution_pool": s.pool,
            "attempt": 1,
        }
        if iteration is not None:
            payload["iteration"] = iteration
        issued = self.emit(
            "command.issued",
            payload,
            aggregate_type="command",
            aggregate_id=command_id,
            key=self.key("command", command_id, 1, "issued"),
        )
        self.commands.append(
            {
                "command_id": int(command_id),
                "execution_id": int(s.execution_id),
                "tenant_id": s.tenant_id,
                "organization_id": s.organization_id,
                "step": step,
                "execution_pool": s.pool,
                "status": "issued",
                "attempt": 1,
                "args": args,
                "trace": s.trace,
                "issued_event_id": int(issued.event_id),
                "kind": kind,
                "step_run_id": int(step_run_id),
                "iteration": iteration,
                "item": item,
                "max_attempts": self.orch.max_attempts,
            }
        )
        self.notes.append(self.orch.note(s, command_id, issued.event_id, step, 1))

    def finish_step(
        self, plan: StepPlan, args: dict[str, Any], step_run_id: str, name: str, result: Any, error: Any
    ) -> None:
        """The terminal event of a step run, then routing (§8) on it."""
        s = self.state
        status = "ok" if name in SUCCESS_EVENTS else "error"
        s.results[plan.name] = result
        self.emit(
            name, {"step": plan.name, "step_run_id": step_run_id, "status": status, "result": result, "error": error}
        )
        event = {"name": name, "step": plan.name, "status": status, "result": result, "error": error}
        scope = build_scope(workload=s.workload, ctx=s.ctx, args=args, event=event)
        try:
            selected = route(self.orch.renderer, plan, event, scope)
        except TemplateFailure as exc:
            self.fail({"kind": exc.code, "message": exc.message, **(exc.details or {})})
            return
        for arc in selected:
            self.emit("next.selected", arc.event_payload(plan.name, name))
            self.queue.append((arc.step, arc.args))
        if name == "step.failed" and not selected:
            self.fail({"kind": "step_failed", "step": plan.name, "error": error})

    def fail(self, error: dict[str, Any]) -> None:
        if self.failure is None:
            self.failure = error

    def drain(self) -> None:
        while self.queue and self.failure is None:
            self.fire(*self.queue.popleft())

    def close(self, still_open: int) -> None:
        """End the execution when it failed, or when no command or token is left."""
        s = self.state
        if self.failure is not None:
            self.queue.clear()
            for row in self.commands:
                row["status"] = "cancelled"
            self.notes.clear()
            s.status, s.error = "failed", self.failure
            self.emit("playbook.failed", {"path": s.path, "error": self.failure}, key=self.key("playbook.ended"))
        elif still_open == 0 and not self.commands and not self.queue:
            s.status = "completed"
            self.emit(
                "playbook.completed", {"path": s.path, "steps": sorted(s.results)}, key=self.key("playbook.ended")
            )

    # -- reports --------------------------------------------------------------------------------

    def iteration_ended(
        self, loop: dict[str, Any], index: int, status: str, result: Any, error: Any, patch: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Fold one iteration's outcome into its loop; end the loop when nothing is left in flight. The
        error of a parallel iteration failed by a ``ctx`` conflict (its command's row records it), else ``None``."""
        loop["in_flight"] -= 1
        writer = f"iteration {index}"
        conflict = None
        if loop["mode"] == "parallel":
            conflict = self._conflict(loop, patch, writer)
            if conflict is not None:  # the iteration fails and writes nothing, as in-process
                status, result, error, patch = "error", None, conflict, []
        apply_patch(self.state.ctx, patch)
        if loop["mode"] == "parallel":
            for op in patch:
                loop["ctx_owners"].setdefault(_unescape(op["path"][1:]), writer)
        if status == "ok" or loop["mode"] == "parallel":  # as in-process: a parallel loop keeps every finished run
            loop["results"][str(index)] = result
        if status != "ok" and (loop["failed_index"] is None or index < loop["failed_index"]):
            loop["failed_index"] = index
            loop["error"] = {**(error or {}), "iteration": index}
        self.top_up(loop)
        if loop["in_flight"] or (loop["failed_index"] is None and loop["next_index"] < len(loop["items"])):
            return conflict
        ordered = [loop["results"][k] for k in sorted(loop["results"], key=int)]
        name = "loop.done" if loop["failed_index"] is None else "step.failed"
        self.finish_step(self.plans[loop["step"]], loop["args"], str(loop["step_run_id"]), name, ordered, loop["error"])
        return conflict

    def _conflict(self, loop: dict[str, Any], patch: list[dict[str, Any]], writer: str) -> dict[str, Any] | None:
        """§6.6: a ``ctx`` key another iteration of this parallel loop wrote with a different value."""
        for op in patch:
            key = _unescape(op["path"][1:])
            owner = loop["ctx_owners"].get(key)
            if owner is not None and owner != writer and self.state.ctx.get(key) != op.get("value"):
                return {
                    "kind": "ctx_conflict",
                    "message": f"set_ctx conflict on key '{key}': already written by {owner} in this parallel loop",
                    "key": key,
                    "owner": owner,
                    "writer": writer,
                }
        return None


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
