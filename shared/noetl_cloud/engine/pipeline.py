"""The tool pipeline of one step run or loop iteration (§5, §6).

:func:`run_pipeline` is a generator: it yields before each task attempt (a point where a driver may stop
between attempts) and returns a :class:`PipelineResult`; :func:`drive` runs it to its end. Parallel loop
iterations each drive their own pipeline on a thread (``engine.loop``). Each task attempt emits
``task.started`` and ``task.done``; a ``set_ctx`` emits ``ctx.patched``.

* A task's config (all keys but ``kind``/``spec``, minus the tool's ``raw_fields``) and ``spec`` knobs are
  rendered with ``workload``, ``ctx``, ``args``, ``iter``, ``_prev``, ``_task`` and ``_attempt`` visible.
* A template error, an unknown tool kind or a ``set_ctx`` conflict fails the task, and so the pipeline,
  without consulting the policy: retrying cannot fix them.
* ``retry`` reruns the task while ``attempt < attempts``, waiting :func:`~noetl_cloud.engine.policy.backoff_delay`
  on the injected clock; once exhausted an error outcome fails the pipeline and an ok outcome continues.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noetl_cloud.engine.events import EmitFn
from noetl_cloud.engine.model import Task
from noetl_cloud.engine.outcome import Clock, Outcome, ToolCall, ToolResolver
from noetl_cloud.engine.payloads import PayloadStore, compact
from noetl_cloud.engine.policy import Decision, backoff_delay, decide
from noetl_cloud.engine.state import CtxConflict, CtxStore
from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope
from noetl_cloud.errors import NoetlError

#: Task attempts one pipeline may make before it is stopped (a jump cycle that never breaks).
DEFAULT_MAX_TASK_RUNS = 10_000


@dataclass
class StepContext:
    """What every task of one step run can see and use."""

    execution_id: str
    step: str
    step_run_id: str
    workload: Mapping[str, Any]
    ctx: CtxStore
    args: Mapping[str, Any]
    tools: ToolResolver
    renderer: Renderer
    clock: Clock
    emit: EmitFn
    next_id: Callable[[], str]
    payloads: PayloadStore | None = None
    threshold: int = 256 * 1024
    keychain: Mapping[str, Any] = field(default_factory=dict)
    run_child: Callable[[str, dict[str, Any]], Outcome] | None = None
    max_task_runs: int = DEFAULT_MAX_TASK_RUNS


@dataclass
class PipelineResult:
    """How a pipeline ended: ``ok`` (ran out of tasks or ``break``) or ``failed``, its last result and iter."""

    status: Literal["ok", "failed"]
    result: Any
    error: dict[str, Any] | None
    iter_scope: dict[str, Any]


def run_pipeline(
    sc: StepContext,
    tasks: tuple[Task, ...],
    iter_scope: dict[str, Any],
    *,
    iteration: int | None = None,
    writer: str | None = None,
) -> Generator[None, None, PipelineResult]:
    """Run ``tasks`` in order under their policies; ``iter_scope`` is this iteration's (mutated in place).

    ``writer`` identifies the iteration to the ``ctx`` write-once guard of parallel loops.
    """
    labels = [task.label for task in tasks]
    pc, runs, prev = 0, 0, None
    while pc < len(tasks):
        task = tasks[pc]
        attempt = 1
        while True:
            runs += 1
            if runs > sc.max_task_runs:
                error = {"kind": "pipeline_runaway", "message": f"more than {sc.max_task_runs} task runs"}
                return PipelineResult("failed", prev, error, iter_scope)
            yield
            locals_ = {"_prev": prev, "_task": task.label, "_attempt": attempt}
            run_id = task_run_id(sc.step_run_id, iteration, runs)
            outcome, fatal = _attempt(sc, task, iter_scope, locals_, iteration, run_id)
            decision: Decision | None = None
            if fatal is None:
                scope = _scope(sc, iter_scope, locals_, outcome=outcome.to_dict())
                try:
                    decision = decide(task.rules, outcome.status, scope, sc.renderer, step=sc.step, task=task.label)
                except TemplateFailure as exc:
                    fatal = {"kind": exc.code, "message": exc.message, **_details(exc)}
            ctx_write = decision.set_ctx if fatal is None and decision is not None else None
            with sc.ctx.lock if ctx_write else contextlib.nullcontext():  # check, task.done, write: one step
                if ctx_write:
                    try:  # a write-once conflict fails this attempt, and task.done says so (§6.6)
                        sc.ctx.check(ctx_write, writer=writer)
                    except CtxConflict as exc:
                        fatal = {"kind": exc.code, "message": exc.message, **_details(exc)}
                delay = None
                if fatal is None and decision is not None and decision.do == "retry" and attempt < decision.attempts:
                    delay = backoff_delay(decision.backoff, decision.delay, attempt)
                _task_done(sc, task, attempt, iteration, run_id, outcome, decision, fatal, delay)
                if fatal is None and decision is not None:
                    _apply_writes(sc, task, decision, iter_scope, writer, run_id)
            if fatal is not None:
                return PipelineResult("failed", prev, {**fatal, "task": task.label}, iter_scope)
            assert decision is not None
            if delay is not None:
                sc.clock.sleep(delay)
                attempt += 1
                continue
            break
        prev = outcome.result
        do = decision.do
        if do == "retry":  # attempts exhausted
            do = "fail" if outcome.status == "error" else "continue"
        if do == "fail":
            error = outcome.error or {"kind": "policy_fail", "message": f"task '{task.label}' policy chose fail"}
            return PipelineResult("failed", prev, {**error, "task": task.label}, iter_scope)
        if do == "break":
            return PipelineResult("ok", prev, None, iter_scope)
        pc = labels.index(decision.to) if do == "jump" and decision.to is not None else pc + 1
    return PipelineResult("ok", prev, None, iter_scope)


def drive(pipeline: Generator[None, None, PipelineResult]) -> PipelineResult:
    """Run a pipeline generator to its end (sequential execution)."""
    result = drive_until(pipeline, None)
    assert result is not None
    return result


def drive_until(
    pipeline: Generator[None, None, PipelineResult], stop: Callable[[], bool] | None
) -> PipelineResult | None:
    """Run the pipeline to its end, asking ``stop`` before each task attempt; ``None`` when stopped
    (the pipeline is closed)."""
    while True:
        try:
            next(pipeline)
        except StopIteration as done:
            result: PipelineResult = done.value
            return result
        if stop is not None and stop():
            pipeline.close()
            return None


def _scope(sc: StepContext, iter_scope: dict[str, Any] | None, locals_: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return build_scope(workload=sc.workload, ctx=sc.ctx.data, iter_scope=iter_scope, args=sc.args, **locals_, **extra)


def _details(exc: NoetlError) -> dict[str, Any]:
    return {key: value for key, value in (exc.details or {}).items() if value is not None}


def task_run_id(step_run_id: str, iteration: int | None, run: int) -> str:
    """The id of one task attempt (DSL v2 §9.3), shared by its ``task.started``, ``task.done`` and
    ``ctx.patched``: the step run, the iteration, and the attempt's place among the pipeline's task runs
    (a jump back to a task is a new run). Derived, not drawn, so a redelivered command names its task
    runs alike and no id of the step run shifts."""
    return f"{step_run_id}/{run}" if iteration is None else f"{step_run_id}/{iteration}/{run}"


def _attempt(
    sc: StepContext,
    task: Task,
    iter_scope: dict[str, Any],
    locals_: dict[str, Any],
    iteration: int | None,
    run_id: str,
) -> tuple[Outcome, dict[str, Any] | None]:
    """Render the task, emit task.started, run the tool. Returns the outcome and, if fatal, the error."""
    attempt = int(locals_["_attempt"])
    sc.emit(
        "task.started",
        {
            "step": sc.step,
            "task": task.label,
            "kind": task.kind,
            "attempt": attempt,
            "iteration": iteration,
            "step_run_id": sc.step_run_id,
            "task_run_id": run_id,
        },
    )
    started = sc.clock.now()
    try:
        tool = sc.tools.get(task.kind)
    except NoetlError as exc:
        fatal = {"kind": exc.code, "message": exc.message}
        return Outcome(status="error", error=fatal), fatal
    scope = _scope(sc, iter_scope, locals_)
    raw = {key: task.config[key] for key in tool.raw_fields if key in task.config}
    try:
        config = sc.renderer.render(
            {k: v for k, v in task.config.items() if k not in raw}, scope, step=sc.step, task=task.label
        )
        spec = sc.renderer.render(task.spec, scope, step=sc.step, task=task.label)
    except TemplateFailure as exc:
        fatal = {"kind": exc.code, "message": exc.message, **_details(exc)}
        return Outcome(status="error", error=fatal), fatal
    call = ToolCall(
        kind=task.kind,
        config={**config, **raw},
        spec=spec,
        execution_id=sc.execution_id,
        step=sc.step,
        task=task.label,
        attempt=attempt,
        keychain=sc.keychain,
        run_child=_child_runner(sc, iter_scope, iteration),
    )
    outcome = tool.run(call)
    return outcome.with_meta(attempt=attempt, duration=round(sc.clock.now() - started, 6)), None


def _child_runner(
    sc: StepContext, iter_scope: dict[str, Any], iteration: int | None
) -> Callable[[str, dict[str, Any]], Outcome] | None:
    """``run_child`` for one task: inside a loop iteration, a runner that accepts ``parent_iter`` gets this
    iteration's ``iter`` (a copy), which the child sees as ``iter.parent`` (§3.5)."""
    run_child = sc.run_child
    if run_child is None or iteration is None:
        return run_child
    try:
        takes_parent = "parent_iter" in inspect.signature(run_child).parameters
    except (TypeError, ValueError):
        takes_parent = False
    if not takes_parent:
        return run_child
    parent = copy.deepcopy(iter_scope)
    runner: Any = run_child

    def run_with_parent(path: str, args: dict[str, Any]) -> Outcome:
        result: Outcome = runner(path, args, parent_iter=parent)
        return result

    return run_with_parent


def _apply_writes(
    sc: StepContext, task: Task, decision: Decision, iter_scope: dict[str, Any], writer: str | None, run_id: str
) -> None:
    if decision.set_iter:
        iter_scope.update(decision.set_iter)
    if decision.set_ctx:
        patch = sc.ctx.apply(decision.set_ctx, writer=writer)
        if patch:
            body = {"step": sc.step, "task": task.label, "step_run_id": sc.step_run_id, "task_run_id": run_id}
            sc.emit("ctx.patched", {**body, "patch": patch})


def _task_done(
    sc: StepContext,
    task: Task,
    attempt: int,
    iteration: int | None,
    run_id: str,
    outcome: Outcome,
    decision: Decision | None,
    fatal: dict[str, Any] | None,
    delay: float | None,
) -> None:
    name = f"{sc.step}/{task.label}/{attempt}" if iteration is None else f"{sc.step}/{iteration}/{task.label}/{attempt}"
    body = compact(
        outcome.status,
        outcome.result,
        store=sc.payloads,
        execution_id=sc.execution_id,
        name=name,
        threshold=sc.threshold,
    )
    payload: dict[str, Any] = {
        "step": sc.step,
        "task": task.label,
        "attempt": attempt,
        "iteration": iteration,
        "step_run_id": sc.step_run_id,
        "task_run_id": run_id,
        **body,
        "error": fatal or outcome.error,
        "meta": outcome.meta,
        "directive": "fail" if fatal is not None or decision is None else decision.do,
    }
    payload.update({namespace: fields for namespace, fields in outcome.extra.items() if namespace not in payload})
    if delay is not None:
        payload["retry_delay"] = delay
    sc.emit("task.done", payload)
