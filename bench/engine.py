"""Tasks per second through the in-process DSL v2 engine, next to a baseline measured in the same run.

Figures (best of ``--repeat`` runs each):

* a 10,000-iteration sequential loop of one ``noop`` task (one execution, 10,000 task attempts);
* a 3-task pipeline (``noop`` tasks passing ``_prev`` along, the last one writing ``set_iter``), run as whole
  executions, so playbook start, step and routing events are included.

Baseline: ``NoopTool().run(ToolCall(...))`` called directly 10,000 times in the same loop shape, i.e. what a
task costs without the engine (rendering, policy, events). Events go to a sink that drops them, so the
figures are the engine's own cost, not an event store's.

    .venv/bin/python bench/engine.py [--iterations 10000] [--executions 2000] [--repeat 5]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from noetl_cloud.engine import Engine, FakeClock, ToolCall
from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.spec import PlaybookDoc, validate_document
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.registry import ToolRegistry


class DropSink:
    """Counts events and keeps none."""

    def __init__(self) -> None:
        self.count = 0

    def emit(self, event: EventEnvelope) -> None:
        self.count += 1


def playbook(workflow: list[dict[str, Any]]) -> PlaybookDoc:
    doc = validate_document(
        {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "bench"}, "workflow": workflow}
    )
    assert isinstance(doc, PlaybookDoc)
    return doc


NOOP_LOOP = playbook(
    [
        {
            "step": "start",
            "loop": {"spec": {"mode": "sequential"}, "in": "{{ workload.items }}", "iterator": "item"},
            "tool": {"kind": "noop"},
        }
    ]
)

PIPELINE = playbook(
    [
        {
            "step": "start",
            "tool": [
                {"fetch": {"kind": "noop", "result": "{{ workload.n }}"}},
                {"transform": {"kind": "noop", "result": "{{ _prev + 1 }}"}},
                {
                    "store": {
                        "kind": "noop",
                        "result": "{{ _prev }}",
                        "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue", "set_iter": {"n": 1}}}}]}},
                    }
                },
            ],
        }
    ]
)


def engine() -> tuple[Engine, DropSink]:
    sink = DropSink()
    return Engine(tools=ToolRegistry([NoopTool()]), sink=sink, clock=FakeClock()), sink


def best(repeat: int, work: Callable[[], None]) -> float:
    """The shortest wall time of ``repeat`` runs of ``work``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--executions", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, runs = args.iterations, args.executions

    tool = NoopTool()

    def baseline() -> None:
        for index in range(n):
            call = ToolCall("noop", {"result": None}, {}, "1", "start", "start", 1)
            tool.run(call).with_meta(attempt=1, duration=0.0, index=index)

    items = list(range(n))

    def noop_loop() -> None:
        eng, _sink = engine()
        result = eng.run(NOOP_LOOP, {"items": items})
        assert result.status == "completed" and len(result.results["start"]) == n

    def pipelines() -> None:
        eng, _sink = engine()
        for _ in range(runs):
            result = eng.run(PIPELINE, {"n": 41})
            assert result.status == "completed" and result.results["start"] == 42

    base = best(args.repeat, baseline)
    loop = best(args.repeat, noop_loop)
    pipe = best(args.repeat, pipelines)
    eng, sink = engine()
    eng.run(NOOP_LOOP, {"items": items})
    loop_events = sink.count
    eng, sink = engine()
    eng.run(PIPELINE, {"n": 41})
    pipe_events = sink.count

    print(f"in-process engine, best of {args.repeat} runs each; events dropped by the sink")
    print(f"{'figure':<52} {'tasks/s':>12} {'us/task':>9} {'ratio':>8}")
    print(f"{'baseline: NoopTool.run called directly':<52} {n / base:>12,.0f} {base / n * 1e6:>9.2f} {1:>8.2f}")
    print(
        f"{f'noop loop, {n:,} iterations ({loop_events:,} events)':<52} "
        f"{n / loop:>12,.0f} {loop / n * 1e6:>9.2f} {(loop / n) / (base / n):>8.1f}"
    )
    tasks = 3 * runs
    print(
        f"{f'3-task pipeline, {runs:,} executions ({pipe_events} events each)':<52} "
        f"{tasks / pipe:>12,.0f} {pipe / tasks * 1e6:>9.2f} {(pipe / tasks) / (base / n):>8.1f}"
    )
    print(f"3-task pipeline executions/s: {runs / pipe:,.0f}")
    print(f"per task: {loop / n * 1e6:.1f} us (noop loop; goal <= 100 us)")
    print(f"ratio to baseline: {(loop / n) / (base / n):.1f}x the direct tool call")


if __name__ == "__main__":
    main()
