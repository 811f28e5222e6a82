"""§7 parallel loops in the in-process runner: iterations really run at the same time, up to ``max_in_flight``,
their results come back in index order, and ``ctx`` stays write-once per key (§6.6) under concurrency.

Concurrency is shown by conditions, never by timing: a barrier that ``max_in_flight`` iterations must all
reach together, and iterations that can only end after the one after them has ended."""

from __future__ import annotations

import threading
from typing import Any

from noetl_cloud.engine import Engine, FakeClock, MemorySink, Outcome, ToolCall
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.registry import ToolRegistry

from .conftest import playbook

WAIT = 10.0  # seconds a condition may take before the test fails; a run that is concurrent never waits it out


class BarrierTool:
    """``kind: barrier``: waits until ``parties`` calls wait together (cyclic), and counts calls in flight."""

    kind = "barrier"
    raw_fields: tuple[str, ...] = ()

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=WAIT)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def run(self, call: ToolCall) -> Outcome:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return Outcome.fail("barrier", "the iterations did not run together")
        finally:
            with self.lock:
                self.in_flight -= 1
        return Outcome.ok(call.config.get("value"))


class ChainTool:
    """``kind: chain``: the call for index ``i`` ends only after the call for ``i + 1`` has ended."""

    kind = "chain"
    raw_fields: tuple[str, ...] = ()

    def __init__(self, size: int) -> None:
        self.ended = [threading.Event() for _ in range(size)]
        self.order: list[int] = []

    def run(self, call: ToolCall) -> Outcome:
        index = int(call.config["index"])
        if index + 1 < len(self.ended) and not self.ended[index + 1].wait(WAIT):
            return Outcome.fail("chain", f"iteration {index + 1} never ended")
        self.order.append(index)
        self.ended[index].set()
        return Outcome.ok(index * 10)


def _engine(*tools: Any) -> tuple[Engine, MemorySink]:
    sink = MemorySink()
    return Engine(tools=ToolRegistry([NoopTool(), *tools]), sink=sink, clock=FakeClock()), sink


def _loop(items: list[Any], max_in_flight: int | None, tool: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"mode": "parallel"}
    if max_in_flight is not None:
        spec["max_in_flight"] = max_in_flight
    return {"step": "start", "loop": {"spec": spec, "in": items, "iterator": "x"}, "tool": tool}


def test_parallel_loop_runs_max_in_flight_iterations_together_and_no_more() -> None:
    barrier = BarrierTool(parties=3)
    engine, _ = _engine(barrier)
    result = engine.run(playbook(_loop(list(range(6)), 3, {"kind": "barrier", "value": "{{ iter.x }}"})))
    assert result.status == "completed", result.error
    assert result.results["start"] == [0, 1, 2, 3, 4, 5]
    assert barrier.most_in_flight == 3


def test_parallel_loop_without_max_in_flight_runs_every_iteration_together() -> None:
    barrier = BarrierTool(parties=5)
    engine, _ = _engine(barrier)
    result = engine.run(playbook(_loop(list(range(5)), None, {"kind": "barrier", "value": "{{ iter.x }}"})))
    assert result.status == "completed", result.error
    assert barrier.most_in_flight == 5


def test_parallel_results_are_in_index_order_when_iterations_end_in_reverse() -> None:
    chain = ChainTool(4)
    engine, sink = _engine(chain)
    result = engine.run(playbook(_loop([0, 1, 2, 3], 4, {"kind": "chain", "index": "{{ iter.index }}"})))
    assert result.status == "completed", result.error
    assert chain.order == [3, 2, 1, 0]
    assert result.results["start"] == [0, 10, 20, 30]
    (done,) = [event.payload for event in sink.events if event.event_type == "loop.done"]
    assert done["result"] == [0, 10, 20, 30]


def test_parallel_events_keep_one_causation_chain() -> None:
    engine, sink = _engine(BarrierTool(parties=4))
    engine.run(playbook(_loop(list(range(8)), 4, {"kind": "barrier", "value": 1})))
    events = sink.events
    assert [event.causation_id for event in events[1:]] == [event.event_id for event in events[:-1]]
    per_iteration: dict[int, list[str]] = {}
    for event in events:
        if event.event_type.startswith("task."):
            per_iteration.setdefault(event.payload["iteration"], []).append(event.event_type)
    assert per_iteration == {index: ["task.started", "task.done"] for index in range(8)}


def test_racing_set_ctx_writes_have_exactly_one_winner() -> None:
    barrier = BarrierTool(parties=4)
    write = {"policy": {"rules": [{"else": {"then": {"set_ctx": {"winner": "{{ iter.x }}"}}}}]}}
    engine, sink = _engine(barrier)
    result = engine.run(playbook(_loop(["a", "b", "c", "d"], 4, {"kind": "barrier", "value": 1, "spec": write})))
    assert result.status == "failed"
    done = [event.payload for event in sink.events if event.event_type == "task.done"]
    winners = [p["iteration"] for p in done if p["error"] is None]
    losers = sorted(p["iteration"] for p in done if p["error"] is not None)
    assert len(winners) == 1 and len(losers) == 3
    assert all(p["error"]["kind"] == "ctx_conflict" for p in done if p["error"] is not None)
    assert result.ctx == {"winner": "abcd"[winners[0]]}
    (patched,) = [event.payload for event in sink.events if event.event_type == "ctx.patched"]
    assert patched["patch"] == [{"op": "add", "path": "/winner", "value": "abcd"[winners[0]]}]
    assert result.error is not None and result.error["error"]["iteration"] == losers[0]


def test_the_exec_hint_is_accepted_and_changes_nothing() -> None:
    engine, _ = _engine(BarrierTool(parties=2))
    step = _loop([1, 2], 2, {"kind": "barrier", "value": "{{ iter.x }}"})
    step["loop"]["spec"]["policy"] = {"exec": "distributed"}
    result = engine.run(playbook(step))
    assert result.status == "completed" and result.results["start"] == [1, 2]
