"""What the golden format (status, ctx, results, event types, sleeps) cannot express: event payloads of some
goldens in ``tests/data/playbooks/``, and focused tests of the engine fixes those goldens revealed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noetl_cloud.engine import FakeClock, MemorySink
from noetl_cloud.engine.local import run_file
from noetl_cloud.envelope import canonical_json, sha256_hex

from .conftest import Harness

PLAYBOOKS = Path(__file__).resolve().parents[2] / "data" / "playbooks"


def _run(name: str) -> tuple[Any, MemorySink, FakeClock]:
    sink, clock = MemorySink(), FakeClock()
    return run_file(PLAYBOOKS / f"{name}.yaml", sink=sink, clock=clock), sink, clock


def _payloads(sink: MemorySink, event_type: str, execution_id: str | None = None) -> list[dict[str, Any]]:
    return [
        event.payload
        for event in sink.events
        if event.event_type == event_type and (execution_id is None or event.execution_id == execution_id)
    ]


def test_large_result_task_done_carries_a_reference_not_the_value() -> None:
    result, sink, _ = _run("large_result_reference")
    assert result.status == "completed" and result.results == {"start": 30000}
    big, measure = _payloads(sink, "task.done")
    assert big["task"] == "big" and big["status"] == "ok" and "result" not in big
    value = ["xxxxxxxxxx"] * 30000
    reference = big["reference"]
    assert reference["kind"] == "temp_ref" and reference["store"] == "memory"
    assert reference["ref"] == f"noetl://execution/{result.execution_id}/start/big/1"
    assert reference["size"] == len(canonical_json(value).encode()) > 256 * 1024
    assert reference["checksum"] == sha256_hex(canonical_json(value))
    assert big["context"] == {"count": 30000}
    assert measure["task"] == "measure" and measure["result"] == 30000 and "reference" not in measure
    (done,) = _payloads(sink, "step.done")
    assert done["result"] == 30000 and "reference" not in done


def test_parallel_loop_has_at_most_max_in_flight_iterations_running() -> None:
    _, sink, _ = _run("loop_parallel")
    running: set[int] = set()
    most = 0
    for event in sink.events:  # an iteration runs from its first task.started to its last task.done
        if event.event_type == "task.started" and event.payload["step"] == "start":
            running.add(event.payload["iteration"])
            most = max(most, len(running))
        elif event.event_type == "task.done" and event.payload["task"] == "report":
            running.discard(event.payload["iteration"])
    assert 1 <= most <= 2 and not running
    started = [(p["iteration"], p["task"]) for p in _payloads(sink, "task.started") if p["step"] == "start"]
    assert sorted(started) == [(i, task) for i in range(4) for task in ("report", "square")]
    assert all(started.index((i, "square")) < started.index((i, "report")) for i in range(4))


def test_retry_backoff_task_done_records_directives_and_delays() -> None:
    _, sink, clock = _run("retry_backoff")
    done = _payloads(sink, "task.done")
    assert [p["attempt"] for p in done] == [1, 2, 3]
    assert [p["directive"] for p in done] == ["retry", "retry", "continue"]
    assert [p.get("retry_delay") for p in done] == [1.5, 3.0, None]
    assert [p["py"]["exception_type"] for p in done[:2]] == ["ConnectionError", "ConnectionError"]
    assert clock.sleeps == [1.5, 3.0]


def test_template_failure_names_the_expression_step_and_task() -> None:
    _, sink, _ = _run("template_failure")
    (failed,) = _payloads(sink, "step.failed")
    error = failed["error"]
    assert error["kind"] == "template_failed" and error["step"] == "start" and error["task"] == "broken"
    assert error["expression"] == "{{ workload.missing.field + 1 }}"
    assert "step 'start', task 'broken'" in error["message"]
    broken = [p for p in _payloads(sink, "task.done") if p["task"] == "broken"]
    assert len(broken) == 1 and broken[0]["directive"] == "fail" and "retry_delay" not in broken[0]


# -- engine fix: a write-once conflict is decided before task.done, which records it (§6.6) ---------------


def test_ctx_conflict_is_recorded_in_task_done_and_nothing_is_patched() -> None:
    result, sink, _ = _run("parallel_set_ctx_conflict")
    claims = [p for p in _payloads(sink, "task.done") if p["task"] == "claim"]
    assert [p["directive"] for p in claims] == ["continue", "fail"]
    assert claims[0]["error"] is None
    assert claims[1]["error"]["kind"] == "ctx_conflict" and claims[1]["error"]["key"] == "winner"
    assert [p["patch"] for p in _payloads(sink, "ctx.patched")] == [
        [{"op": "add", "path": "/mode", "value": "same"}, {"op": "add", "path": "/winner", "value": "a"}]
    ]
    assert result.ctx == {"mode": "same", "winner": "a"}


def test_ctx_conflict_under_a_retry_rule_fails_without_waiting(harness: Harness) -> None:
    then = {"do": "retry", "attempts": 3, "delay": 5, "set_ctx": {"k": "{{ iter.x }}"}}
    result = harness.run(
        {
            "step": "start",
            "loop": {"spec": {"mode": "parallel"}, "in": [1, 2], "iterator": "x"},
            "tool": {"kind": "noop", "spec": {"policy": {"rules": [{"else": {"then": then}}]}}},
        }
    )
    assert result.status == "failed" and result.ctx["k"] in (1, 2)
    conflicted = [p for p in harness.payloads_of("task.done") if p["error"]]
    assert len(conflicted) == 1 and conflicted[0]["directive"] == "fail" and "retry_delay" not in conflicted[0]
    assert conflicted[0]["iteration"] == 2 - result.ctx["k"]  # the iteration that did not write first
    assert harness.clock.sleeps == [5, 5]  # the winner's own retries only


# -- engine fix: run_file's child playbooks see the calling loop iteration as iter.parent (§3.5) ------------


_CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: start
    tool: {kind: noop, result: "{{ iter.parent | default('no parent') }}"}
"""


_PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent}
workflow:
  - step: start
    tool: {kind: playbook, path: child}
    next: [{step: looped}]
  - step: looped
    loop: {in: [7], iterator: n}
    tool: {kind: playbook, path: child}
"""


def test_only_a_child_started_from_a_loop_iteration_sees_iter_parent(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(_CHILD)
    (tmp_path / "parent.yaml").write_text(_PARENT)
    result = run_file(tmp_path / "parent.yaml")
    assert result.status == "completed", result.error
    assert result.results["start"]["results"] == {"start": "no parent"}
    assert result.results["looped"][0]["results"] == {"start": {"n": 7, "index": 0}}
