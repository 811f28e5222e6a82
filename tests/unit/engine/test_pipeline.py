"""Pipelines (§5, §6) through the engine: outcomes, directives, retries on the fake clock, set_iter/set_ctx."""

from __future__ import annotations

from typing import Any

from noetl_cloud.engine import Outcome

from .conftest import Harness, playbook


def step(name: str, tool: Any, **extra: Any) -> dict[str, Any]:
    return {"step": name, "tool": tool, **extra}


def rules(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"policy": {"rules": list(entries)}}


def test_prev_task_and_attempt_locals_are_visible(harness: Harness) -> None:
    result = harness.run(
        step(
            "start",
            [
                {"a": {"kind": "echo", "value": 2}},
                {
                    "b": {
                        "kind": "echo",
                        "value": {"prev": "{{ _prev * 10 }}", "task": "{{ _task }}", "n": "{{ _attempt }}"},
                    }
                },
            ],
        )
    )
    assert result.status == "completed"
    assert result.results["start"] == {"prev": 20, "task": "b", "n": 1}


def test_single_task_mapping_uses_the_step_name_as_label(harness: Harness) -> None:
    harness.run(step("start", {"kind": "echo", "value": 1}))
    assert harness.payloads_of("task.started")[0]["task"] == "start"


def test_error_without_policy_fails_the_step_and_the_execution(harness: Harness) -> None:
    result = harness.run(step("start", [{"a": {"kind": "echo", "fail": True}}, {"b": {"kind": "echo", "value": 1}}]))
    assert result.status == "failed"
    assert result.error is not None and result.error["step"] == "start" and result.error["error"]["kind"] == "boom"
    assert harness.types() == [
        "playbook.started",
        "step.started",
        "task.started",
        "task.done",
        "step.failed",
        "playbook.failed",
    ]


def test_retry_with_exponential_backoff_waits_on_the_injected_clock(harness: Harness) -> None:
    harness.script.scripts["fetch"] = [
        Outcome.fail("http_status", "503", http={"status": 503}),
        Outcome.fail("http_status", "429", http={"status": 429}),
        Outcome.fail("http_status", "500", http={"status": 500}),
        Outcome.ok({"page": 1}),
    ]
    retry = {
        "when": "{{ outcome.status == 'error' and outcome.http.status in [429, 500, 503] }}",
        "then": {"do": "retry", "attempts": 10, "backoff": "exponential", "delay": 2.0},
    }
    result = harness.run(step("start", [{"fetch": {"kind": "script", "spec": rules(retry)}}]))
    assert result.status == "completed" and result.results["start"] == {"page": 1}
    assert harness.clock.sleeps == [2.0, 4.0, 8.0]
    done = harness.payloads_of("task.done")
    assert [d["attempt"] for d in done] == [1, 2, 3, 4]
    assert [d["directive"] for d in done] == ["retry", "retry", "retry", "continue"]
    assert [d.get("retry_delay") for d in done] == [2.0, 4.0, 8.0, None]
    assert [c.attempt for c in harness.script.calls] == [1, 2, 3, 4]


def test_retry_exhausted_on_error_fails(harness: Harness) -> None:
    harness.script.scripts["fetch"] = [Outcome.fail("x", "down")]
    retry = {
        "when": "{{ outcome.status == 'error' }}",
        "then": {"do": "retry", "attempts": 3, "backoff": "linear", "delay": 1},
    }
    result = harness.run(step("start", [{"fetch": {"kind": "script", "spec": rules(retry)}}]))
    assert result.status == "failed" and harness.clock.sleeps == [1.0, 2.0]
    assert len(harness.script.calls) == 3


def test_retry_exhausted_on_ok_continues(harness: Harness) -> None:
    harness.script.scripts["poll"] = [Outcome.ok({"ready": False})]
    retry = {"when": "{{ not outcome.result.ready }}", "then": {"do": "retry", "attempts": 2}}
    result = harness.run(
        step("start", [{"poll": {"kind": "script", "spec": rules(retry)}}, {"after": {"kind": "echo", "value": "x"}}])
    )
    assert result.status == "completed" and result.results["start"] == "x" and harness.clock.sleeps == [0.0]


def test_jump_and_break_drive_a_counter_loop_with_set_iter(harness: Harness) -> None:
    tasks = [
        {"init": {"kind": "noop", "spec": rules({"else": {"then": {"do": "continue", "set_iter": {"n": 0}}}})}},
        {"work": {"kind": "echo", "value": "{{ iter.n }}"}},
        {
            "decide": {
                "kind": "noop",
                "spec": rules(
                    {
                        "when": "{{ iter.n < 3 }}",
                        "then": {"do": "jump", "to": "work", "set_iter": {"n": "{{ iter.n + 1 }}"}},
                    },
                    {"else": {"then": {"do": "break"}}},
                ),
            }
        },
        {"never": {"kind": "echo", "value": "unreached"}},
    ]
    result = harness.run(step("start", tasks))
    assert result.status == "completed"
    assert [c.config["value"] for c in harness.echo.calls] == [0, 1, 2, 3]


def test_policy_fail_on_ok_outcome_fails_with_a_policy_error(harness: Harness) -> None:
    fail = {"when": "{{ outcome.result == 'bad' }}", "then": {"do": "fail"}}
    result = harness.run(step("start", [{"check": {"kind": "echo", "value": "bad", "spec": rules(fail)}}]))
    assert result.status == "failed" and result.error is not None
    assert result.error["error"]["kind"] == "policy_fail" and result.error["error"]["task"] == "check"


def test_set_ctx_records_a_patch_event(harness: Harness) -> None:
    write = {"else": {"then": {"do": "continue", "set_ctx": {"token": "{{ outcome.result }}", "n": 1}}}}
    result = harness.run(step("start", [{"login": {"kind": "echo", "value": "abc", "spec": rules(write)}}]))
    assert result.ctx == {"token": "abc", "n": 1}
    (patched,) = harness.payloads_of("ctx.patched")
    assert patched["patch"] == [
        {"op": "add", "path": "/token", "value": "abc"},
        {"op": "add", "path": "/n", "value": 1},
    ]
    assert harness.types()[3:5] == ["task.done", "ctx.patched"]


def test_template_error_fails_the_task_naming_step_task_and_expression(harness: Harness) -> None:
    result = harness.run(step("start", [{"bad": {"kind": "echo", "value": "{{ workload.nope + 1 }}"}}]))
    assert result.status == "failed" and result.error is not None
    error = result.error["error"]
    assert error["kind"] == "template_failed" and error["task"] == "bad" and error["step"] == "start"
    assert error["expression"] == "{{ workload.nope + 1 }}"
    assert harness.echo.calls == []


def test_template_error_is_not_retried_even_if_policy_says_retry(harness: Harness) -> None:
    retry = {"else": {"then": {"do": "retry", "attempts": 5}}}
    result = harness.run(step("start", [{"bad": {"kind": "echo", "value": "{{ nope }}", "spec": rules(retry)}}]))
    assert result.status == "failed" and harness.clock.sleeps == []


def test_unknown_tool_kind_fails_the_task(harness: Harness) -> None:
    result = harness.run(step("start", {"kind": "teleport"}))
    assert result.status == "failed" and result.error is not None
    assert result.error["error"]["kind"] == "unknown_tool"


def test_spec_knobs_are_rendered_and_passed_to_the_tool(harness: Harness) -> None:
    harness.run(step("start", {"kind": "echo", "value": 1, "spec": {"timeout": "{{ workload.t }}"}}), workload={"t": 5})
    assert harness.echo.calls[0].spec == {"timeout": 5}


def test_runaway_jump_cycle_is_stopped(harness: Harness) -> None:
    spin = rules({"else": {"then": {"do": "jump", "to": "spin"}}})
    engine = harness.engine()
    engine.max_task_runs = 50
    result = engine.run(playbook(step("start", [{"spin": {"kind": "noop", "spec": spin}}])))
    assert result.status == "failed" and result.error is not None
    assert result.error["error"]["kind"] == "pipeline_runaway"
