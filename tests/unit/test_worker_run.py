"""run_command: the golden playbooks' steps and loop iterations run as single commands, built by hand the
way the control plane builds them (catalog document, scope, iteration), and reported as POST /api/events
bodies."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.engine import FakeClock, Outcome, ToolCall
from noetl_cloud.engine.runner import merge_workload
from noetl_cloud.spec import PlaybookDoc, parse_document
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.registry import ToolRegistry, default_registry
from noetl_cloud.worker.run import PlanCache, Report, run_command

PLAYBOOKS = Path(__file__).resolve().parents[1] / "data" / "playbooks"
T0 = datetime(2026, 11, 22, 10, 0, 1, 250000, tzinfo=UTC)
TASK_PAIR = ["task.started", "task.done"]


def document(name: str) -> PlaybookDoc:
    doc = parse_document((PLAYBOOKS / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(doc, PlaybookDoc)
    return doc


def command(
    name: str,
    step: str,
    *,
    kind: str = "step",
    workload: dict[str, Any] | None = None,
    ctx: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
    iteration: dict[str, Any] | None = None,
    catalog_id: str = "7001",
) -> dict[str, Any]:
    """A command as GET /api/commands/{id} answers it; the document is the catalog's JSON form."""
    doc = document(name)
    return {
        "command_id": "3001",
        "execution_id": "2001",
        "kind": kind,
        "step": step,
        "status": "claimed",
        "attempt": 1,
        "execution_pool": "shared",
        "worker_id": "worker-shared-1",
        "lease_expires_at": "2026-11-22T10:00:30+00:00",
        "step_run_id": "4001",
        "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        "playbook": {
            "catalog_id": catalog_id,
            "path": doc.path,
            "version": 1,
            "document": doc.model_dump(mode="json", by_alias=True, exclude_none=True),
        },
        "scope": {"workload": merge_workload(doc.workload, workload), "ctx": ctx or {}, "args": args or {}},
        "iteration": iteration,
    }


def ticking() -> Any:
    """A wall clock that advances one millisecond per reading."""
    state = {"t": T0}

    def now() -> datetime:
        current = state["t"]
        state["t"] = current + timedelta(milliseconds=1)
        return current

    return now


def types(report: Report) -> list[str]:
    return [event["event_type"] for event in report.events]


def noop_tools() -> ToolRegistry:
    return ToolRegistry([NoopTool()])


# -- loop iterations ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("index,n", [(0, 1), (1, 2), (2, 3)])
def test_parallel_loop_iteration_reports_its_own_result_and_no_ctx_patch(index: int, n: int) -> None:
    it = {"index": index, "item": n, "iterator": "n", "parallel": True}
    report = run_command(command("loop_parallel", "start", kind="iteration", iteration=it), tools=noop_tools())
    assert report.status == "ok" and report.error is None
    assert report.result == {"index": index, "n": n, "square": n * n}
    assert report.ctx_patch == []
    assert types(report) == TASK_PAIR * 2
    assert {event["payload"]["iteration"] for event in report.events} == {index}
    assert {event["payload"]["step_run_id"] for event in report.events} == {"4001"}


def test_parallel_loop_iteration_that_sets_ctx_reports_the_patch_and_ctx_patched() -> None:
    it = {"index": 3, "item": 4, "iterator": "n", "parallel": True}
    report = run_command(command("loop_parallel", "start", kind="iteration", iteration=it), tools=noop_tools())
    assert report.result == {"index": 3, "n": 4, "square": 16}
    assert report.ctx_patch == [{"op": "add", "path": "/last_square", "value": 16}]
    assert types(report) == [*TASK_PAIR, *TASK_PAIR, "ctx.patched"]
    assert report.events[-1]["payload"]["patch"] == report.ctx_patch


def test_the_step_after_the_loop_reads_its_args() -> None:
    report = run_command(command("loop_parallel", "total", args={"squares": [1, 4, 9, 16]}), tools=noop_tools())
    assert (report.status, report.result, report.ctx_patch) == ("ok", 30, [])
    assert types(report) == TASK_PAIR
    assert report.events[0]["payload"]["iteration"] is None


class PagedHttp:
    """``kind: http`` without a network: GET <any>/items pages the numbers 0..4 like the engine tests' API."""

    kind = "http"
    raw_fields: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def run(self, call: ToolCall) -> Outcome:
        self.calls.append(call)
        page, size, total = int(call.config["params"]["page"]), int(call.config["params"]["pageSize"]), 5
        data = list(range((page - 1) * size, min(page * size, total)))
        body = {"data": data, "paging": {"page": page, "hasMore": page * size < total}}
        return Outcome.ok({"status_code": 200, "headers": {}, "data": body}, http={"status": 200})


def test_pagination_iteration_jumps_until_break_and_patches_ctx_per_page() -> None:
    http = PagedHttp()
    tools = ToolRegistry([NoopTool(), http])
    first = command(
        "pagination",
        "fetch_all",
        kind="iteration",
        iteration={"index": 0, "item": {"path": "/items", "page_size": 2}, "iterator": "endpoint", "parallel": False},
    )
    report = run_command(first, tools=tools)
    assert report.status == "ok" and report.result == [0, 1, 2, 3, 4]
    assert [int(call.config["params"]["page"]) for call in http.calls] == [1, 2, 3]
    assert report.ctx_patch == [
        {"op": "add", "path": "/pages", "value": 1},
        {"op": "replace", "path": "/pages", "value": 2},
        {"op": "replace", "path": "/pages", "value": 3},
    ]
    page = [*TASK_PAIR, *TASK_PAIR, "ctx.patched", *TASK_PAIR]
    assert types(report) == [*TASK_PAIR, *page, *page, *page]

    # The next (sequential) iteration is issued after the first one's patch was applied: it starts from it.
    second = command(
        "pagination",
        "fetch_all",
        kind="iteration",
        ctx={"pages": 3},
        iteration={"index": 1, "item": {"path": "/items", "page_size": 4}, "iterator": "endpoint", "parallel": False},
    )
    report = run_command(second, tools=tools)
    assert report.result == [0, 1, 2, 3, 4]
    assert report.ctx_patch == [
        {"op": "replace", "path": "/pages", "value": 4},
        {"op": "replace", "path": "/pages", "value": 5},
    ]


# -- steps ----------------------------------------------------------------------------------------------------


def test_retries_wait_on_the_injected_clock_and_every_attempt_is_reported() -> None:
    clock = FakeClock()
    report = run_command(command("retry_backoff", "start"), tools=default_registry(), clock=clock)
    assert report.status == "ok" and report.result == {"succeeded_on": 3}
    assert clock.sleeps == [1.5, 3.0]
    assert report.ctx_patch == [{"op": "add", "path": "/attempts", "value": 3}]
    assert types(report) == [*TASK_PAIR * 3, "ctx.patched"]
    started = [event["payload"]["attempt"] for event in report.events if event["event_type"] == "task.started"]
    assert started == [1, 2, 3]
    done = [event["payload"] for event in report.events if event["event_type"] == "task.done"]
    assert [payload["retry_delay"] for payload in done[:2]] == [1.5, 3.0]


def test_a_failing_task_is_an_error_report_with_the_last_result_and_the_task_error() -> None:
    report = run_command(command("failure_cleanup", "start"), tools=default_registry())
    assert report.status == "error" and report.result is None
    assert report.error is not None and report.error["task"] == "explode"
    assert report.error["message"] == "ValueError: bad input"
    assert report.ctx_patch == [] and types(report) == TASK_PAIR * 2


def test_a_template_failure_fails_the_step_without_retrying() -> None:
    report = run_command(command("template_failure", "start"), tools=noop_tools())
    assert report.status == "error" and report.result == 1
    assert report.error is not None
    assert (report.error["kind"], report.error["task"]) == ("template_failed", "broken")
    assert types(report) == TASK_PAIR * 2


def test_the_cleanup_step_sets_ctx_from_its_args() -> None:
    report = run_command(
        command("failure_cleanup", "cleanup", args={"why": "ValueError: bad input"}), tools=noop_tools()
    )
    assert (report.status, report.result) == ("ok", "ValueError: bad input")
    assert report.ctx_patch == [{"op": "add", "path": "/cleaned", "value": True}]


def test_ctx_starts_from_the_scope_so_an_unchanged_value_is_no_patch() -> None:
    report = run_command(
        command("failure_cleanup", "cleanup", ctx={"cleaned": True}, args={"why": "x"}), tools=noop_tools()
    )
    assert report.status == "ok" and report.ctx_patch == [] and types(report) == TASK_PAIR


# -- child playbooks --------------------------------------------------------------------------------------------


class Children:
    """A ``run_child`` that records its calls and answers like engine/local.py does."""

    def __init__(self, status: str = "completed") -> None:
        self.status = status
        self.calls: list[tuple[str, dict[str, Any], Mapping[str, Any] | None]] = []

    def __call__(self, path: str, args: dict[str, Any], parent_iter: Mapping[str, Any] | None) -> Outcome:
        self.calls.append((path, args, parent_iter))
        body = {"execution_id": "5001", "status": self.status, "ctx": {"doubled": 42}, "results": {"start": 42}}
        if self.status == "completed":
            return Outcome.ok(body)
        return Outcome("error", body, {"kind": "child_failed", "message": f"child playbook {path} failed"})


def test_a_playbook_task_runs_the_child_through_run_child_and_sees_its_outcome() -> None:
    children = Children()
    report = run_command(command("sub_playbook", "start"), tools=default_registry(), run_child=children)
    assert children.calls == [("children/double", {"x": 21}, None)]
    assert report.status == "ok"
    assert report.result == {"status": "completed", "ctx": {"doubled": 42}, "results": {"start": 42}}
    assert report.ctx_patch == [{"op": "add", "path": "/child_status", "value": "completed"}]
    assert types(report) == [*TASK_PAIR, "ctx.patched", *TASK_PAIR]


def test_a_failed_child_fails_the_task_under_its_policy() -> None:
    report = run_command(command("sub_playbook", "start"), tools=default_registry(), run_child=Children("failed"))
    assert report.status == "error"
    assert report.error is not None and (report.error["kind"], report.error["task"]) == ("child_failed", "call")


def test_a_child_started_inside_an_iteration_gets_that_iteration_as_parent_iter() -> None:
    children = Children()
    it = {"index": 1, "item": "h2", "iterator": "hotel", "parallel": False}
    report = run_command(
        command("nested_loop_parent", "start", kind="iteration", iteration=it),
        tools=default_registry(),
        run_child=children,
    )
    assert report.status == "ok"
    assert children.calls == [("children/rooms", {"rooms": ["r1", "r2"]}, {"hotel": "h2", "index": 1})]


def test_without_run_child_a_playbook_task_is_an_unsupported_error() -> None:
    report = run_command(command("sub_playbook", "start"), tools=default_registry())
    assert report.status == "error" and report.error is not None and report.error["kind"] == "unsupported"


# -- the report body ------------------------------------------------------------------------------------------


def test_to_body_is_exactly_the_events_body_of_the_contract() -> None:
    it = {"index": 3, "item": 4, "iterator": "n", "parallel": True}
    report = run_command(
        command("loop_parallel", "start", kind="iteration", iteration=it), tools=noop_tools(), now=ticking()
    )
    body = report.to_body("worker-shared-1", 2, "3001")
    assert list(body) == [
        "command_id",
        "worker_id",
        "attempt",
        "started_at",
        "status",
        "result",
        "error",
        "ctx_patch",
        "events",
    ]
    assert (body["command_id"], body["worker_id"], body["attempt"]) == ("3001", "worker-shared-1", 2)
    assert body["started_at"] == "2026-11-22T10:00:01.250000+00:00"
    assert (body["status"], body["error"]) == ("ok", None)
    assert [list(event) for event in body["events"]] == [["event_type", "payload", "occurred_at"]] * 5
    times = [event["occurred_at"] for event in body["events"]]
    assert times == sorted(times) and times[0] > body["started_at"]


def test_results_are_reported_in_their_json_form_and_a_result_without_one_fails_the_command() -> None:
    class Odd:
        kind = "odd"
        raw_fields: tuple[str, ...] = ()

        def __init__(self, value: Any) -> None:
            self.value = value

        def run(self, call: ToolCall) -> Outcome:
            return Outcome.ok(self.value)

    doc = document("failure_cleanup").model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["workflow"] = [{"step": "start", "tool": {"kind": "odd"}}]
    cmd = command("failure_cleanup", "start")
    cmd["playbook"] = {"catalog_id": None, "document": doc}
    report = run_command(cmd, tools=ToolRegistry([Odd(T0)]))
    assert report.status == "ok" and report.result == T0.isoformat()
    report = run_command(cmd, tools=ToolRegistry([Odd(object())]))  # the engine cannot even record it
    assert report.status == "error" and report.error is not None and report.error["kind"] == "tool_crashed"


# -- bad commands, stops, crashes --------------------------------------------------------------------------------


def _without(cmd: dict[str, Any], *path: str) -> dict[str, Any]:
    node = cmd
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return cmd


@pytest.mark.parametrize(
    "make",
    [
        lambda: "not a command",
        lambda: {**command("loop_parallel", "total"), "step": "nowhere"},
        lambda: {**command("loop_parallel", "total"), "kind": "loop"},
        lambda: {**command("loop_parallel", "total"), "execution_id": "not-a-snowflake"},
        lambda: _without(command("loop_parallel", "total"), "playbook", "document"),
        lambda: {**command("loop_parallel", "total"), "playbook": {"catalog_id": "1", "document": {"kind": "Nope"}}},
        lambda: {**command("loop_parallel", "total"), "scope": {"ctx": []}},
        lambda: command("loop_parallel", "start"),  # a loop step as a step command
        lambda: command("loop_parallel", "total", kind="iteration", iteration={"index": 0, "item": 1}),
        lambda: command("loop_parallel", "start", kind="iteration"),  # no iteration
        lambda: command("loop_parallel", "start", kind="iteration", iteration={"index": -1, "item": 1}),
        lambda: command("loop_parallel", "start", kind="iteration", iteration={"index": 0, "item": 1, "iterator": "x"}),
    ],
)
def test_a_malformed_command_is_a_bad_command_report_not_an_exception(make: Any) -> None:
    report = run_command(make(), tools=noop_tools(), compiled=PlanCache())
    assert report.status == "error" and report.error is not None and report.error["kind"] == "bad_command"
    assert report.events == [] and report.ctx_patch == [] and not report.stopped


def test_an_invalid_document_names_the_failing_fields() -> None:
    cmd = command("loop_parallel", "total")
    cmd["playbook"]["document"]["workflow"] = []
    report = run_command(cmd, tools=noop_tools())
    assert report.error is not None and report.error["kind"] == "bad_command"
    assert any(detail["field"].startswith("workflow") for detail in report.error["details"])


def test_plans_are_compiled_once_per_catalog_id() -> None:
    cache = PlanCache(maxsize=2)
    first = command("loop_parallel", "total", args={"squares": [1]}, catalog_id="11")
    assert run_command(first, tools=noop_tools(), compiled=cache).result == 1
    # Same catalog id: the cached plan runs even though this document was (impossibly) changed.
    changed = command("loop_parallel", "total", args={"squares": [1]}, catalog_id="11")
    changed["playbook"]["document"]["workflow"][1]["tool"]["result"] = "changed"
    assert run_command(changed, tools=noop_tools(), compiled=cache).result == 1
    changed["playbook"]["catalog_id"] = "12"
    assert run_command(changed, tools=noop_tools(), compiled=cache).result == "changed"
    assert len(cache) == 2
    run_command(
        command("loop_parallel", "total", args={"squares": [1]}, catalog_id="13"), tools=noop_tools(), compiled=cache
    )
    assert len(cache) == 2  # the least recently used version left


def test_stop_abandons_the_run_before_the_next_task_attempt() -> None:
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) >= 2  # let the first task attempt run, then stop

    it = {"index": 0, "item": 1, "iterator": "n", "parallel": True}
    report = run_command(
        command("loop_parallel", "start", kind="iteration", iteration=it), tools=noop_tools(), stop=stop
    )
    assert report.stopped and report.status == "error"
    assert report.events == []  # a stopped run reports nothing


def test_a_tool_that_raises_fails_the_command_with_tool_crashed() -> None:
    class Crashing:
        kind = "noop"
        raw_fields: tuple[str, ...] = ()

        def run(self, call: ToolCall) -> Outcome:
            raise RuntimeError("secret-ish detail")

    it = {"index": 2, "item": 3, "iterator": "n", "parallel": True}
    report = run_command(
        command("loop_parallel", "start", kind="iteration", iteration=it), tools=ToolRegistry([Crashing()])
    )
    assert report.status == "error" and report.error is not None
    assert report.error == {"kind": "tool_crashed", "message": "a task attempt raised RuntimeError", "iteration": 2}
    assert types(report) == ["task.started"]


def test_an_iteration_error_carries_its_index() -> None:
    doc = document("loop_parallel").model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["workflow"][0]["tool"] = [{"boom": {"kind": "noop", "result": "{{ missing_name }}"}}]
    cmd = command("loop_parallel", "start", kind="iteration", iteration={"index": 5, "item": 9})
    cmd["playbook"] = {"catalog_id": None, "document": doc}
    report = run_command(cmd, tools=noop_tools())
    assert report.error is not None and report.error["iteration"] == 5 and report.error["task"] == "boom"


def test_a_child_executions_commands_see_the_parent_iteration_as_iter_parent() -> None:
    it = {"index": 1, "item": "r2", "iterator": "room", "parallel": False}
    cmd = command("nested_loop_parent", "start", kind="iteration", iteration=it)
    child = parse_document((PLAYBOOKS / "children" / "rooms.yaml").read_text(encoding="utf-8"))
    cmd["playbook"] = {"catalog_id": "7002", "path": "children/rooms", "document": child.model_dump(mode="json")}
    cmd["scope"]["parent_iter"] = {"hotel": "h1", "index": 0}
    report = run_command(cmd, tools=noop_tools())
    assert (report.status, report.result) == ("ok", "h1/0-r2/1")
