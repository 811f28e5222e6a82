"""Loops (§7, §3.3): one pipeline run per element, each with its own ``iter`` scope.

* ``sequential``: iterations run one after another; the first failed iteration stops the loop.
* ``parallel``: up to ``max_in_flight`` iterations (default: all) run at the same time, each on a thread of a
  pool of that size, and start in index order. After a failure no new iteration starts; those in flight
  finish. ``ctx`` is write-once per key across iterations (§6.6): a conflicting ``set_ctx`` fails the iteration
  (which of two racing writers wins is the one that wrote first). The results come back in index order
  whatever order the iterations end in; the events of iterations in flight interleave as they happen (the
  emitter is serialized, so each event's causation is the one emitted before it).

``iter`` holds ``<iterator>`` (the element), ``index`` and, for a loop run inside an outer iteration,
``parent`` (the outer ``iter``).
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
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
    limit = max(1, min(loop.max_in_flight or len(items), len(items)))
    pending = deque(enumerate(items))
    finished: dict[int, PipelineResult] = {}
    sc.ctx.guard()
    try:
        with ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"loop-{sc.step}") as pool:
            running: dict[Future[PipelineResult], int] = {}
            while pending or running:
                while pending and len(running) < limit and not _any_failed(finished):
                    index, item = pending.popleft()
                    scope = iteration_scope(loop, item, index, parent)
                    pipeline = run_pipeline(sc, tasks, scope, iteration=index, writer=f"iteration {index}")
                    running[pool.submit(contextvars.copy_context().run, drive, pipeline)] = index
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finished[running.pop(future)] = future.result()
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
