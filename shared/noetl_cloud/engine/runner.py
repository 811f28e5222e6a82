"""The in-process interpreter of DSL v2 (§2, §4, §7, §8): tokens move through steps until none is left.

For each token, in FIFO order: admission (§4.2), ``step.started``, the pipeline (once, or once per loop
element), the terminal event (``step.done``, ``loop.done`` for a loop step, or ``step.failed``), then routing
(§8) on that event. The execution completes when no token is left; it fails when a step fails and no arc
handles its ``step.failed``, when routing cannot be evaluated, or when more than ``max_tokens`` tokens fire.

Routing: an arc's ``when`` sees ``event`` (``{name, step, status, result, error}``), ``ctx``, ``workload`` and
the token's ``args``. An arc *without* ``when`` fires on success only (``step.done`` / ``loop.done``); to handle
``step.failed`` an arc needs an explicit guard, e.g. ``{{ event.name == 'step.failed' }}``.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noetl_cloud.engine.events import Emitter, EventSink
from noetl_cloud.engine.loop import run_loop
from noetl_cloud.engine.model import StepPlan, compile_playbook
from noetl_cloud.engine.outcome import Clock, Outcome, SystemClock, ToolResolver
from noetl_cloud.engine.payloads import DEFAULT_THRESHOLD, PayloadStore, compact
from noetl_cloud.engine.pipeline import DEFAULT_MAX_TASK_RUNS, StepContext, drive, run_pipeline
from noetl_cloud.engine.routing import SUCCESS_EVENTS, admit, collection, route, template_error
from noetl_cloud.engine.state import CtxStore
from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope
from noetl_cloud.envelope import EventFactory
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.spec.playbook import PlaybookDoc


@dataclass(frozen=True)
class Token:
    """A token (§2.1): the step it enters and its inscription."""

    step: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutionResult:
    """The end of one execution: its status, final ``ctx``, last result per step and the failure if any."""

    execution_id: str
    status: Literal["completed", "failed"]
    ctx: dict[str, Any]
    results: dict[str, Any]
    error: dict[str, Any] | None
    workload: dict[str, Any]


def merge_workload(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """§3.1: the playbook's workload with the request's overrides merged in (mappings merge deeply)."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_workload(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class Engine:
    """Runs playbooks in this process. Tools, the event sink, ids, the clock and the payload store are injected."""

    def __init__(
        self,
        *,
        tools: ToolResolver,
        sink: EventSink,
        factory: EventFactory | None = None,
        clock: Clock | None = None,
        payloads: PayloadStore | None = None,
        threshold: int = DEFAULT_THRESHOLD,
        max_tokens: int = 10_000,
        max_task_runs: int = DEFAULT_MAX_TASK_RUNS,
        run_child: Callable[[str, dict[str, Any]], Outcome] | None = None,
    ) -> None:
        self.tools = tools
        self.sink = sink
        ids = SnowflakeGenerator()
        self.next_id: Callable[[], str] = ids.next_str
        self.factory = factory or EventFactory(
            tenant_id="local", organization_id="local", producer="noetl-engine", next_id=ids.next_id
        )
        self.clock = clock or SystemClock()
        self.payloads = payloads
        self.threshold = threshold
        self.max_tokens = max_tokens
        self.max_task_runs = max_task_runs
        self.run_child = run_child
        self.renderer = Renderer()

    def run(
        self,
        doc: PlaybookDoc,
        workload: Mapping[str, Any] | None = None,
        *,
        execution_id: str | None = None,
        keychain: Mapping[str, Any] | None = None,
        parent_iter: Mapping[str, Any] | None = None,
    ) -> ExecutionResult:
        """Run ``doc`` to its end with ``workload`` overrides; every event goes to the sink.

        Raises :class:`~noetl_cloud.errors.ValidationFailed` before any event if the steps cannot be compiled.
        """
        plans = compile_playbook(doc)
        eid = execution_id or self.next_id()
        run = _Run(self, doc, plans, eid, merge_workload(doc.workload, workload), keychain or {}, parent_iter)
        return run.execute()


class _Run:
    """The state of one execution."""

    def __init__(
        self,
        engine: Engine,
        doc: PlaybookDoc,
        plans: dict[str, StepPlan],
        execution_id: str,
        workload: dict[str, Any],
        keychain: Mapping[str, Any],
        parent_iter: Mapping[str, Any] | None,
    ) -> None:
        self.engine = engine
        self.doc = doc
        self.plans = plans
        self.execution_id = execution_id
        self.workload = workload
        self.keychain = keychain
        self.parent_iter = parent_iter
        self.ctx = CtxStore()
        self.results: dict[str, Any] = {}
        self.emit = Emitter(engine.factory, engine.sink, execution_id)
        self.render = engine.renderer

    def execute(self) -> ExecutionResult:
        entry = self.doc.entry_step()
        self.emit("playbook.started", {"path": self.doc.path, "entry_step": entry, "workload": self.workload})
        queue: deque[Token] = deque([Token(entry)])
        fired = 0
        while queue:
            fired += 1
            if fired > self.engine.max_tokens:
                return self._fail({"kind": "token_limit", "message": f"more than {self.engine.max_tokens} tokens"})
            token = queue.popleft()
            try:
                follow, failure = self._fire(token)
            except TemplateFailure as exc:
                return self._fail({"kind": exc.code, "message": exc.message, **(exc.details or {})})
            if failure is not None:
                return self._fail(failure)
            queue.extend(follow)
        self.emit("playbook.completed", {"path": self.doc.path, "steps": sorted(self.results)})
        return ExecutionResult(self.execution_id, "completed", self.ctx.snapshot(), self.results, None, self.workload)

    def _fail(self, error: dict[str, Any]) -> ExecutionResult:
        self.emit("playbook.failed", {"path": self.doc.path, "error": error})
        return ExecutionResult(self.execution_id, "failed", self.ctx.snapshot(), self.results, error, self.workload)

    # -- one token ----------------------------------------------------------------------------------------

    def _fire(self, token: Token) -> tuple[list[Token], dict[str, Any] | None]:
        """Admit, run and route one token: the tokens it produces, or the error that fails the execution."""
        plan = self.plans[token.step]
        scope = build_scope(workload=self.workload, ctx=self.ctx.data, args=token.args, token=token.args)
        step_run_id = self.engine.next_id()
        try:
            allowed, rule = self._admit(plan, scope)
        except TemplateFailure as exc:
            self.emit("step.started", {"step": plan.name, "step_run_id": step_run_id, "args": token.args})
            return self._finish(plan, token, step_run_id, "step.failed", None, template_error(exc))
        if not allowed:
            self.emit("step.denied", {"step": plan.name, "args": token.args, "rule": rule})
            return [], None
        self.emit("step.started", {"step": plan.name, "step_run_id": step_run_id, "args": token.args})
        sc = StepContext(
            execution_id=self.execution_id,
            step=plan.name,
            step_run_id=step_run_id,
            workload=self.workload,
            ctx=self.ctx,
            args=token.args,
            tools=self.engine.tools,
            renderer=self.render,
            clock=self.engine.clock,
            emit=self.emit,
            next_id=self.engine.next_id,
            payloads=self.engine.payloads,
            threshold=self.engine.threshold,
            keychain=self.keychain,
            run_child=self.engine.run_child,
            max_task_runs=self.engine.max_task_runs,
        )
        if plan.loop is not None:
            try:
                items = self._collection(plan, scope)
            except TemplateFailure as exc:
                return self._finish(plan, token, step_run_id, "step.failed", None, template_error(exc))
            looped = run_loop(sc, plan.loop, plan.tasks, items, self.parent_iter)
            name = "loop.done" if looped.status == "ok" else "step.failed"
            return self._finish(plan, token, step_run_id, name, looped.results, looped.error)
        scope_iter: dict[str, Any] = {"parent": self.parent_iter} if self.parent_iter is not None else {}
        outcome = drive(run_pipeline(sc, plan.tasks, scope_iter))
        name = "step.done" if outcome.status == "ok" else "step.failed"
        return self._finish(plan, token, step_run_id, name, outcome.result, outcome.error)

    def _admit(self, plan: StepPlan, scope: dict[str, Any]) -> tuple[bool, int | None]:
        return admit(self.render, plan, scope)

    def _collection(self, plan: StepPlan, scope: dict[str, Any]) -> list[Any]:
        return collection(self.render, plan, scope, self.engine.payloads)

    def _finish(
        self,
        plan: StepPlan,
        token: Token,
        step_run_id: str,
        name: str,
        result: Any,
        error: dict[str, Any] | None,
    ) -> tuple[list[Token], dict[str, Any] | None]:
        status = "ok" if name in SUCCESS_EVENTS else "error"
        self.results[plan.name] = result
        body = compact(
            status,
            result,
            store=self.engine.payloads,
            execution_id=self.execution_id,
            name=f"{plan.name}/{step_run_id}",
            threshold=self.engine.threshold,
        )
        self.emit(name, {"step": plan.name, "step_run_id": step_run_id, **body, "error": error})
        event = {"name": name, "step": plan.name, "status": status, "result": result, "error": error}
        follow = self._route(plan, token, event)
        if name == "step.failed" and not follow:
            return [], {"kind": "step_failed", "step": plan.name, "error": error}
        return follow, None

    def _route(self, plan: StepPlan, token: Token, event: dict[str, Any]) -> list[Token]:
        """§8: the fired arcs, each a ``next.selected`` event and the next token."""
        scope = build_scope(workload=self.workload, ctx=self.ctx.data, args=token.args, event=event)
        follow: list[Token] = []
        for selected in route(self.render, plan, event, scope):
            self.emit("next.selected", selected.event_payload(plan.name, event["name"]))
            follow.append(Token(selected.step, selected.args))
        return follow
