"""Loops (§7, §3.3): one pipeline run per element, each with its own ``iter`` scope.

* ``sequential``: iterations run one after another; the first failed iteration stops the loop.
* ``parallel``: up to ``max_in_flight`` iterations are in flight; they are interleaved deterministically, one
  task attempt each per round, in index order. After a failure no new iteration starts; those in flight
  finish. ``ctx`` is write-once per key across iterations (§6.6): a conflicting ``set_ctx`` fails the iteration.

``iter`` holds ``<iterator>`` (the element), ``index`` and, for a loop run inside an outer iteration,
``parent`` (the outer ``iter``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from noetl_cloud.engine.model import Loop, Task
from noetl_cloud.engine.pipeline import PipelineResult, StepContext, drive, run_pipeline


@dataclass
class LoopResult:
    """How a loop ended: every iteration ok, or the first failure (by index) and its error."""

    status: Literal["ok", "failed"]
    results: list[Any]
    error: dict[str, Any] | None
    completed: int


def iteration_scope(loop: Loop, item: Any, index: int, parent: Mapping[str, Any] | None) -> dict[str, Any]:
    """A fresh ``iter`` scope for element ``index``."""
    scope: dict[str, Any] = {loop.iterator: item, "index": index}
    if parent is not None:
        scope["parent"] = parent
    return scope


def run_loop(
    sc: StepContext, loop: Loop, tasks: tuple[Task, ...], items: list[Any], parent: Mapping[str, Any] | None = None
) -> LoopResult:
    """Run the pipeline once per element of ``items`` under the loop's mode."""
    if loop.mode == "parallel":
        return _parallel(sc, loop, tasks, items, parent)
    results: list[Any] = []
    for index, item in enumerate(items):
        outcome = drive(run_pipeline(sc, tasks, iteration_scope(loop, item, index, parent), iteration=index))
        if outcome.status == "failed":
            return LoopResult("failed", results, {**(outcome.error or {}), "iteration": index}, index)
        results.append(outcome.result)
    return LoopResult("ok", results, None, len(items))


def _parallel(
    sc: StepContext, loop: Loop, tasks: tuple[Task, ...], items: list[Any], parent: Mapping[str, Any] | None
) -> LoopResult:
    limit = loop.max_in_flight or max(len(items), 1)
    pending = deque(enumerate(items))
    active: list[tuple[int, Generator[None, None, PipelineResult]]] = []
    finished: dict[int, PipelineResult] = {}
    sc.ctx.guard()
    try:
        while pending or active:
            while pending and len(active) < limit and not _any_failed(finished):
                index, item = pending.popleft()
                scope = iteration_scope(loop, item, index, parent)
                active.append((index, run_pipeline(sc, tasks, scope, iteration=index, writer=f"iteration {index}")))
            if not active:
                break
            for entry in list(active):
                index, pipeline = entry
                try:
                    next(pipeline)
                except StopIteration as stop:
                    finished[index] = stop.value
                    active.remove(entry)
    finally:
        sc.ctx.unguard()
    failures = sorted(index for index, result in finished.items() if result.status == "failed")
    ordered = [finished[index].result for index in sorted(finished)]
    if failures:
        first = failures[0]
        return LoopResult("failed", ordered, {**(finished[first].error or {}), "iteration": first}, len(finished))
    return LoopResult("ok", ordered, None, len(finished))


def _any_failed(finished: dict[int, PipelineResult]) -> bool:
    return any(result.status == "failed" for result in finished.values())
