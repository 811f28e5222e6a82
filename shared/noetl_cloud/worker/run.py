"""Run one command (docs/distributed.md): the tool pipeline of a step run, or of one loop iteration.

Pure: no HTTP, no database. The command document (as ``GET /api/commands/{id}`` or the claim answers
it) goes in, a :class:`Report` comes out, and :meth:`Report.to_body` is the body of ``POST /api/events``.

* ``kind: step`` runs the step's pipeline once, with ``iter`` empty (or ``{"parent": …}`` when the
  command's scope carries a ``parent_iter``, see below).
* ``kind: iteration`` runs it for one element: ``iter`` is ``{<iterator>: item, "index": index}``, the
  task events carry ``iteration: index`` and the ``ctx`` writer is ``"iteration <index>"`` (as the
  in-process parallel loop names it). A failed iteration's error carries ``iteration: index``.

``ctx`` starts from ``scope.ctx``; ``ctx_patch`` is every RFC 6902 op the run's ``set_ctx`` applied, in
order, relative to that ``ctx``. ``events`` are the pipeline's own events (``task.started``,
``task.done``, ``ctx.patched``) as ``{event_type, payload, occurred_at}``.

A malformed command (an unknown step, a missing document, an iteration of a step without a loop, …) is
an error report of kind ``bad_command``, never an exception. A tool that raises instead of returning an
error outcome (a bug in the tool) is an error report of kind ``tool_crashed``: the command ends as
``command.failed`` at once rather than after every lease of the reaper has expired.

``scope.parent_iter`` is optional: the ``iter`` of the parent's iteration when this execution is a child
playbook started inside a loop (dsl-v2-spec §3.5); every ``iter`` of the run has it as ``parent``.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from noetl_cloud.engine.loop import iteration_scope
from noetl_cloud.engine.model import StepPlan, compile_playbook
from noetl_cloud.engine.outcome import Clock, Outcome, SystemClock, ToolResolver
from noetl_cloud.engine.pipeline import StepContext, drive_until, run_pipeline
from noetl_cloud.engine.state import CtxStore
from noetl_cloud.engine.templates import Renderer
from noetl_cloud.envelope import EventEnvelope, EventFactory, utc_now
from noetl_cloud.errors import NoetlError
from noetl_cloud.spec import PlaybookDoc, validate_document

log = logging.getLogger(__name__)

#: ``run_child(path, args, parent_iter)``: start a child playbook and wait for its end (the worker's
#: service posts ``/api/execute`` and follows the child; tests pass a function).
RunChild = Callable[[str, dict[str, Any], Mapping[str, Any] | None], Outcome]

KINDS = ("step", "iteration")
_SNOWFLAKE_MAX_DIGITS = 19


class BadCommand(NoetlError):
    """The command document cannot be run as it is (reported as a failed command, never retried)."""

    status = 422
    code = "bad_command"


@dataclass(frozen=True)
class Report:
    """How one command run ended; :meth:`to_body` is the ``POST /api/events`` body.

    ``stopped`` is true when the run was abandoned because the caller asked it to stop (the lease was
    lost or the execution ended): such a run reports nothing.
    """

    started_at: datetime
    status: Literal["ok", "error"]
    result: Any = None
    error: dict[str, Any] | None = None
    ctx_patch: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def to_body(self, worker_id: str, attempt: int, command_id: str) -> dict[str, Any]:
        """The worker's report of this run, exactly as ``POST /api/events`` takes it."""
        return {
            "command_id": command_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "started_at": self.started_at.isoformat(),
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "ctx_patch": self.ctx_patch,
            "events": self.events,
        }


class PlanCache:
    """Compiled plans of catalog versions, keyed by ``catalog_id`` (a version never changes), LRU-bounded.

    Safe to share between threads.
    """

    def __init__(self, maxsize: int = 64) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.maxsize = maxsize
        self._plans: OrderedDict[str, dict[str, StepPlan]] = OrderedDict()
        self._lock = threading.Lock()

    def plans(self, catalog_id: str | None, document: Mapping[str, Any]) -> dict[str, StepPlan]:
        """The compiled steps of ``document``; compiled once per ``catalog_id`` (every time without one).

        Raises :class:`~noetl_cloud.errors.ValidationFailed` when the document is not a valid playbook.
        """
        if catalog_id is not None:
            with self._lock:
                cached = self._plans.get(catalog_id)
                if cached is not None:
                    self._plans.move_to_end(catalog_id)
                    return cached
        plans = compile_document(document)
        if catalog_id is not None:
            with self._lock:
                self._plans[catalog_id] = plans
                self._plans.move_to_end(catalog_id)
                while len(self._plans) > self.maxsize:
                    self._plans.popitem(last=False)
        return plans

    def __len__(self) -> int:
        return len(self._plans)


def compile_document(document: Mapping[str, Any]) -> dict[str, StepPlan]:
    """Validate a playbook document (the catalog's JSON form) and compile its steps."""
    doc = validate_document(dict(document))
    if not isinstance(doc, PlaybookDoc):
        raise BadCommand(f"the command's document is a {doc.kind}, not a Playbook")
    return compile_playbook(doc)


@dataclass(frozen=True)
class _Command:
    """The parts of a command document a run needs, checked."""

    command_id: str
    execution_id: str
    kind: str
    step: str
    step_run_id: str
    catalog_id: str | None
    document: Mapping[str, Any]
    workload: dict[str, Any]
    ctx: dict[str, Any]
    args: dict[str, Any]
    parent_iter: dict[str, Any] | None
    iteration: dict[str, Any] | None


def run_command(
    command: Mapping[str, Any],
    *,
    tools: ToolResolver,
    clock: Clock | None = None,
    run_child: RunChild | None = None,
    compiled: PlanCache | None = None,
    keychain: Mapping[str, Any] | None = None,
    renderer: Renderer | None = None,
    now: Callable[[], datetime] = utc_now,
    stop: Callable[[], bool] | None = None,
) -> Report:
    """Run ``command`` and return its report; never raises for a bad command or a failing task.

    ``clock`` times tasks and waits between retries; ``now`` is the wall clock of ``started_at`` and
    ``occurred_at``. ``stop`` is asked before each task attempt: once it answers true the run is
    abandoned and the report is ``stopped``. ``keychain`` maps credential aliases to entries.
    """
    started_at = now()
    try:
        cmd = _parse(command)
        plans = (compiled if compiled is not None else PlanCache(1)).plans(cmd.catalog_id, cmd.document)
        plan = plans.get(cmd.step)
        if plan is None:
            raise BadCommand(f"the playbook has no step '{cmd.step}'", details={"step": cmd.step})
        iter_scope, iteration, writer = _iteration(cmd, plan)
    except NoetlError as exc:
        error = {"kind": "bad_command", "message": exc.message}
        if exc.details is not None:
            error["details"] = exc.details
        return Report(started_at, "error", None, error)

    recorder = _Recorder(cmd.execution_id, now)
    sc = StepContext(
        execution_id=cmd.execution_id,
        step=plan.name,
        step_run_id=cmd.step_run_id,
        workload=cmd.workload,
        ctx=CtxStore(cmd.ctx),
        args=cmd.args,
        tools=tools,
        renderer=renderer or Renderer(),
        clock=clock or SystemClock(),
        emit=recorder,
        next_id=_local_ids(cmd.step_run_id),
        keychain=keychain or {},
        run_child=_with_parent_iter(run_child) if run_child is not None else None,
    )
    pipeline = run_pipeline(sc, plan.tasks, iter_scope, iteration=iteration, writer=writer)
    try:
        outcome = drive_until(pipeline, stop)
    except Exception as exc:  # a crashing tool fails this command now, not after every lease has expired
        log.exception(
            "a task raised instead of returning an outcome",
            extra={"command_id": cmd.command_id, "step": cmd.step, "exception_type": type(exc).__name__},
        )
        error = {"kind": "tool_crashed", "message": f"a task attempt raised {type(exc).__name__}"}
        return _report(started_at, "error", None, _in_iteration(error, iteration), recorder)
    if outcome is None:
        return Report(started_at, "error", None, {"kind": "stopped", "message": "the run was stopped"}, stopped=True)
    if outcome.status == "ok":
        return _report(started_at, "ok", outcome.result, None, recorder)
    return _report(started_at, "error", outcome.result, _in_iteration(outcome.error or {}, iteration), recorder)


# -- parsing the command ----------------------------------------------------------------------------


def _parse(command: Any) -> _Command:
    if not isinstance(command, Mapping):
        raise BadCommand("a command is a JSON object")
    command_id = _id(command, "command_id")
    execution_id = _id(command, "execution_id")
    kind = command.get("kind")
    if kind not in KINDS:
        raise BadCommand(f"command kind must be one of {', '.join(KINDS)}", details={"field": "kind"})
    step = command.get("step")
    if not isinstance(step, str) or not step:
        raise BadCommand("the command names no step", details={"field": "step"})
    step_run_id = command.get("step_run_id")
    playbook = _mapping(command, "playbook", required=True)
    document = playbook.get("document")
    if not isinstance(document, Mapping):
        raise BadCommand("the command carries no playbook document", details={"field": "playbook.document"})
    catalog_id = playbook.get("catalog_id")
    scope = _mapping(command, "scope", required=False)
    parent_iter = scope.get("parent_iter")
    if parent_iter is not None and not isinstance(parent_iter, dict):
        raise BadCommand("scope.parent_iter must be an object", details={"field": "scope.parent_iter"})
    iteration = command.get("iteration")
    if iteration is not None and not isinstance(iteration, dict):
        raise BadCommand("iteration must be an object", details={"field": "iteration"})
    return _Command(
        command_id=command_id,
        execution_id=execution_id,
        kind=kind,
        step=step,
        step_run_id=str(step_run_id) if step_run_id not in (None, "") else command_id,
        catalog_id=str(catalog_id) if catalog_id not in (None, "") else None,
        document=document,
        workload=dict(_mapping(scope, "workload", required=False, where="scope.")),
        ctx=dict(_mapping(scope, "ctx", required=False, where="scope.")),
        args=dict(_mapping(scope, "args", required=False, where="scope.")),
        parent_iter=parent_iter,
        iteration=iteration,
    )


def _id(command: Mapping[str, Any], name: str) -> str:
    value = command.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > _SNOWFLAKE_MAX_DIGITS:
        raise BadCommand(f"{name} must be a snowflake id (decimal text)", details={"field": name})
    return value


def _mapping(parent: Mapping[str, Any], name: str, *, required: bool, where: str = "") -> Mapping[str, Any]:
    value = parent.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise BadCommand(f"{where}{name} must be an object", details={"field": f"{where}{name}"})
    return value


def _iteration(cmd: _Command, plan: StepPlan) -> tuple[dict[str, Any], int | None, str | None]:
    """The ``iter`` scope, iteration index and ctx writer of this run."""
    if cmd.kind == "step":
        if plan.loop is not None:
            raise BadCommand(
                f"step '{plan.name}' has a loop: it runs as iteration commands", details={"step": plan.name}
            )
        return ({"parent": cmd.parent_iter} if cmd.parent_iter is not None else {}), None, None
    if plan.loop is None:
        raise BadCommand(f"step '{plan.name}' has no loop: it has no iterations", details={"step": plan.name})
    if plan.loop.mode == "cursor":
        raise BadCommand(
            f"step '{plan.name}' is a cursor loop: its slots run through the frames API (docs/frames.md)",
            details={"step": plan.name},
        )
    if cmd.iteration is None or "item" not in cmd.iteration:
        raise BadCommand(
            "an iteration command needs iteration.index and iteration.item", details={"field": "iteration"}
        )
    index = cmd.iteration.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise BadCommand("iteration.index must be a non-negative integer", details={"field": "iteration.index"})
    iterator = cmd.iteration.get("iterator")
    if iterator is not None and iterator != plan.loop.iterator:
        raise BadCommand(
            f"iteration.iterator '{iterator}' is not the loop's iterator '{plan.loop.iterator}'",
            details={"field": "iteration.iterator"},
        )
    scope = iteration_scope(plan.loop, cmd.iteration["item"], index, cmd.parent_iter)
    return scope, index, f"iteration {index}"


# -- running ----------------------------------------------------------------------------------------


class _Recorder:
    """The pipeline's ``emit``: keeps each event as ``{event_type, payload, occurred_at}``."""

    def __init__(self, execution_id: str, now: Callable[[], datetime]) -> None:
        self._now = now
        self._ids = itertools.count(1)
        self._factory = EventFactory(
            tenant_id="worker", organization_id="worker", producer="noetl-worker", next_id=lambda: next(self._ids)
        )
        self.execution_id = execution_id
        self.events: list[dict[str, Any]] = []
        self.ctx_patch: list[dict[str, Any]] = []

    def __call__(
        self, event_type: str, payload: dict[str, Any], *, meta: dict[str, Any] | None = None
    ) -> EventEnvelope:
        occurred_at = self._now()
        self.events.append({"event_type": event_type, "payload": payload, "occurred_at": occurred_at.isoformat()})
        if event_type == "ctx.patched":
            self.ctx_patch.extend(payload.get("patch") or [])
        # The envelope is only what the engine's emit signature promises; the control plane mints the real one.
        return self._factory.new(
            event_type,
            stream_id=f"execution/{self.execution_id}",
            aggregate_type="execution",
            aggregate_id=self.execution_id,
            execution_id=self.execution_id,
            payload=payload,
            meta=meta,
            event_time=occurred_at,
        )


def _report(
    started_at: datetime, status: Literal["ok", "error"], result: Any, error: dict[str, Any] | None, rec: _Recorder
) -> Report:
    """The report, with every value in its JSON form; a value that has none fails the command."""
    try:
        body = _json_form({"result": result, "error": error, "ctx_patch": rec.ctx_patch, "events": rec.events})
    except (TypeError, ValueError) as exc:
        reason = {"kind": "unserializable_result", "message": f"the run produced a value that is not JSON ({exc})"}
        return Report(started_at, "error", None, reason)
    return Report(started_at, status, body["result"], body["error"], body["ctx_patch"], body["events"])


def _json_form(value: Any) -> Any:
    """``value`` as JSON carries it: datetimes as text, models and sets in their JSON form; NaN and bytes refused."""
    return json.loads(json.dumps(value, allow_nan=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _in_iteration(error: dict[str, Any], iteration: int | None) -> dict[str, Any]:
    return error if iteration is None else {**error, "iteration": iteration}


def _local_ids(prefix: str) -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def _with_parent_iter(run_child: RunChild) -> Callable[..., Outcome]:
    """The engine passes ``parent_iter`` by keyword, and only to a runner that names it."""

    def runner(path: str, args: dict[str, Any], parent_iter: Mapping[str, Any] | None = None) -> Outcome:
        return run_child(path, args, parent_iter)

    return runner


__all__ = ["BadCommand", "PlanCache", "Report", "RunChild", "compile_document", "run_command"]
