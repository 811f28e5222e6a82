"""The interpreter (§2, §4.2, §7, §8, §9): tokens, admission, routing, loops, completion and failure."""

from __future__ import annotations

from typing import Any

from noetl_cloud.engine import Outcome

from .conftest import Harness, playbook


def echo(value: Any = None, **extra: Any) -> dict[str, Any]:
    return {"kind": "echo", "value": value, **extra}


def test_linear_run_emits_the_canonical_event_sequence(harness: Harness) -> None:
    result = harness.run(
        {"step": "start", "tool": echo(1), "next": [{"step": "end", "args": {"got": "{{ event.result }}"}}]},
        {"step": "end", "tool": echo("{{ args.got + 1 }}")},
    )
    assert result.status == "completed" and result.results == {"start": 1, "end": 2}
    assert harness.types() == [
        "playbook.started",
        "step.started",
        "task.started",
        "task.done",
        "step.done",
        "next.selected",
        "step.started",
        "task.started",
        "task.done",
        "step.done",
        "playbook.completed",
    ]
    events = harness.sink.events
    assert all(
        e.execution_id == result.execution_id and e.stream_id == f"execution/{result.execution_id}" for e in events
    )
    assert [e.causation_id for e in events[1:]] == [e.event_id for e in events[:-1]]
    assert harness.payloads_of("next.selected") == [
        {"from": "start", "to": "end", "arc": 0, "on": "step.done", "args": {"got": 1}}
    ]


def test_entry_is_start_and_workload_overrides_merge_deeply(harness: Harness) -> None:
    doc = playbook(
        {"step": "other", "tool": echo("x")},
        {"step": "start", "tool": echo("{{ workload.db.host }}:{{ workload.db.port }}")},
        workload={"db": {"host": "default", "port": 5432}},
    )
    result = harness.engine().run(doc, {"db": {"host": "h"}})
    assert result.results == {"start": "h:5432"}


def test_exclusive_routing_fires_first_match_only(harness: Harness) -> None:
    harness.run(
        {
            "step": "start",
            "tool": echo(5),
            "next": {
                "arcs": [
                    {"step": "big", "when": "{{ event.result > 3 }}"},
                    {"step": "also", "when": "{{ event.result > 1 }}"},
                ]
            },
        },
        {"step": "big", "tool": echo("big")},
        {"step": "also", "tool": echo("also")},
    )
    assert [p["to"] for p in harness.payloads_of("next.selected")] == ["big"]


def test_inclusive_routing_fans_out_to_every_match(harness: Harness) -> None:
    result = harness.run(
        {
            "step": "start",
            "tool": echo(5),
            "next": {
                "spec": {"mode": "inclusive"},
                "arcs": [
                    {"step": "a", "args": {"n": 1}},
                    {"step": "b", "when": "{{ event.result > 100 }}"},
                    {"step": "c", "args": {"n": 3}},
                ],
            },
        },
        {"step": "a", "tool": echo("{{ args.n }}")},
        {"step": "b", "tool": echo("b")},
        {"step": "c", "tool": echo("{{ n }}")},
    )
    assert result.results == {"start": 5, "a": 1, "c": 3}


def test_step_failed_arc_handles_the_failure(harness: Harness) -> None:
    result = harness.run(
        {
            "step": "start",
            "tool": echo(fail=True),
            "next": [
                {"step": "next_one"},
                {
                    "step": "cleanup",
                    "when": "{{ event.name == 'step.failed' }}",
                    "args": {"why": "{{ event.error.kind }}"},
                },
            ],
        },
        {"step": "next_one", "tool": echo("no")},
        {"step": "cleanup", "tool": echo("{{ args.why }}")},
    )
    assert result.status == "completed" and result.results["cleanup"] == "boom" and "next_one" not in result.results
    assert "step.failed" in harness.types() and harness.types()[-1] == "playbook.completed"


def test_unhandled_step_failure_fails_the_execution_and_drops_other_tokens(harness: Harness) -> None:
    result = harness.run(
        {
            "step": "start",
            "tool": echo(1),
            "next": {"spec": {"mode": "inclusive"}, "arcs": [{"step": "bad"}, {"step": "good"}]},
        },
        {"step": "bad", "tool": echo(fail=True)},
        {"step": "good", "tool": echo("g")},
    )
    assert result.status == "failed" and result.error is not None and result.error["step"] == "bad"
    assert "good" not in result.results and harness.types()[-1] == "playbook.failed"


def test_admission_first_match_wins_and_a_denied_token_goes_nowhere(harness: Harness) -> None:
    admit = {
        "policy": {
            "admit": {
                "rules": [
                    {"when": "{{ args.n > 10 }}", "then": {"allow": False}},
                    {"when": "{{ args.n > 0 }}", "then": {"allow": True}},
                    {"else": {"then": {"allow": False}}},
                ]
            }
        }
    }
    result = harness.run(
        {
            "step": "start",
            "tool": echo(0),
            "next": {
                "spec": {"mode": "inclusive"},
                "arcs": [
                    {"step": "gate", "args": {"n": 50}},
                    {"step": "gate", "args": {"n": 5}},
                    {"step": "gate", "args": {"n": 0}},
                ],
            },
        },
        {"step": "gate", "spec": admit, "tool": echo("{{ args.n }}"), "next": [{"step": "after"}]},
        {"step": "after", "tool": echo("after")},
    )
    assert result.status == "completed" and result.results["gate"] == 5
    assert [p["args"]["n"] for p in harness.payloads_of("step.denied")] == [50, 0]
    assert [p["rule"] for p in harness.payloads_of("step.denied")] == [0, 2]
    assert [p["step"] for p in harness.payloads_of("step.started")].count("after") == 1


def test_admission_without_rules_allows(harness: Harness) -> None:
    harness.run({"step": "start", "spec": {"policy": {}}, "tool": echo(1)})
    assert "step.denied" not in harness.types()


def test_step_without_tool_completes_and_routes(harness: Harness) -> None:
    result = harness.run({"step": "start", "next": [{"step": "end"}]}, {"step": "end", "tool": echo(1)})
    assert result.status == "completed" and result.results == {"start": None, "end": 1}


def test_sequential_loop_runs_once_per_element_with_isolated_iter(harness: Harness) -> None:
    tasks = [
        {
            "mark": {
                "kind": "noop",
                "spec": {
                    "policy": {
                        "rules": [{"else": {"then": {"set_iter": {"seen": "{{ iter.seen | default(0) + 1 }}"}}}}]
                    }
                },
            }
        },
        {"out": echo({"city": "{{ iter.city }}", "i": "{{ iter.index }}", "seen": "{{ iter.seen }}"})},
    ]
    result = harness.run(
        {
            "step": "start",
            "loop": {"in": "{{ workload.cities }}", "iterator": "city"},
            "tool": tasks,
            "next": [
                {"step": "end", "when": "{{ event.name == 'loop.done' }}", "args": {"n": "{{ event.result | length }}"}}
            ],
        },
        {"step": "end", "tool": echo("{{ args.n }}")},
        workload={"cities": ["a", "b", "c"]},
    )
    assert result.results["start"] == [{"city": c, "i": i, "seen": 1} for i, c in enumerate("abc")]
    assert result.results["end"] == 3
    types = harness.types()
    assert "step.done" not in types[: types.index("loop.done")] and types.count("loop.done") == 1
    assert [p["iteration"] for p in harness.payloads_of("task.started")][:4] == [0, 0, 1, 1]


def test_loop_failure_stops_sequential_loop_and_fails_step(harness: Harness) -> None:
    result = harness.run(
        {
            "step": "start",
            "loop": {"in": [1, 2, 3], "iterator": "n"},
            "tool": echo("{{ iter.n }}", fail="{{ iter.n == 2 }}"),
        }
    )
    assert result.status == "failed" and result.error is not None and result.error["error"]["iteration"] == 1
    assert [c.config["value"] for c in harness.echo.calls] == [1, 2]


def test_empty_loop_is_done_at_once(harness: Harness) -> None:
    result = harness.run({"step": "start", "loop": {"in": [], "iterator": "x"}, "tool": echo(1)})
    assert result.status == "completed" and result.results["start"] == []
    assert harness.types() == ["playbook.started", "step.started", "loop.done", "playbook.completed"]


def test_loop_in_must_be_a_list(harness: Harness) -> None:
    result = harness.run({"step": "start", "loop": {"in": "{{ 5 }}", "iterator": "x"}, "tool": echo(1)})
    assert result.status == "failed" and result.error is not None
    assert result.error["error"]["kind"] == "template_failed" and "must be a list" in result.error["error"]["message"]


def test_parallel_loop_runs_each_iteration_pipeline_in_order(harness: Harness) -> None:
    tasks = [{"a": echo("{{ iter.x }}a")}, {"b": echo("{{ iter.x }}b")}]
    result = harness.run(
        {
            "step": "start",
            "loop": {"spec": {"mode": "parallel", "max_in_flight": 2}, "in": ["1", "2", "3"], "iterator": "x"},
            "tool": tasks,
        },
    )
    assert result.status == "completed" and result.results["start"] == ["1b", "2b", "3b"]
    calls = [c.config["value"] for c in harness.echo.calls]  # iterations interleave as their threads run
    assert sorted(calls) == ["1a", "1b", "2a", "2b", "3a", "3b"]
    assert all(calls.index(f"{x}a") < calls.index(f"{x}b") for x in "123")


def test_parallel_set_ctx_is_write_once_per_key(harness: Harness) -> None:
    write = {"policy": {"rules": [{"else": {"then": {"set_ctx": {"winner": "{{ iter.x }}"}}}}]}}
    result = harness.run(
        {
            "step": "start",
            "loop": {"spec": {"mode": "parallel"}, "in": ["a", "b"], "iterator": "x"},
            "tool": {"kind": "noop", "spec": write},
            "next": [
                {"step": "recover", "when": "{{ event.name == 'step.failed' }}", "args": {"error": "{{ event.error }}"}}
            ],
        },
        {"step": "recover", "tool": echo("{{ args.error.kind }}@{{ args.error.iteration }}")},
    )
    # the two iterations race: the first to write owns the key, the other fails with ctx_conflict
    winner = result.ctx["winner"]
    assert winner in ("a", "b")
    assert result.results["recover"] == f"ctx_conflict@{'ab'.index('b' if winner == 'a' else 'a')}"


def test_parallel_equal_writes_are_not_conflicts(harness: Harness) -> None:
    write = {"policy": {"rules": [{"else": {"then": {"set_ctx": {"same": True}}}}]}}
    result = harness.run(
        {
            "step": "start",
            "loop": {"spec": {"mode": "parallel"}, "in": [1, 2], "iterator": "x"},
            "tool": {"kind": "noop", "spec": write},
        }
    )
    assert result.status == "completed" and result.ctx == {"same": True}


def test_sequential_loop_may_overwrite_ctx(harness: Harness) -> None:
    write = {"policy": {"rules": [{"else": {"then": {"set_ctx": {"last": "{{ iter.x }}"}}}}]}}
    result = harness.run(
        {"step": "start", "loop": {"in": [1, 2], "iterator": "x"}, "tool": {"kind": "noop", "spec": write}}
    )
    assert result.ctx == {"last": 2}
    assert [p["patch"][0]["op"] for p in harness.payloads_of("ctx.patched")] == ["add", "replace"]


def test_large_results_go_to_the_payload_store_and_events_carry_references(harness: Harness) -> None:
    harness.threshold = 100
    rows = [{"id": i, "name": "x" * 20} for i in range(20)]
    result = harness.run({"step": "start", "tool": echo(rows)})
    assert result.results["start"] == rows  # templates still see the value
    (done,) = harness.payloads_of("task.done")
    assert "result" not in done and done["reference"]["kind"] == "temp_ref" and done["context"] == {"count": 20}
    assert harness.payloads.resolve(done["reference"]) == rows
    (step_done,) = harness.payloads_of("step.done")
    assert step_done["reference"]["ref"].startswith(f"noetl://execution/{result.execution_id}/start/")


def test_cyclic_routing_stops_at_the_token_limit(harness: Harness) -> None:
    engine = harness.engine()
    engine.max_tokens = 20
    result = engine.run(playbook({"step": "start", "tool": echo(1), "next": [{"step": "start"}]}))
    assert result.status == "failed" and result.error is not None and result.error["kind"] == "token_limit"


def test_routing_template_error_fails_the_execution_naming_the_step(harness: Harness) -> None:
    result = harness.run({"step": "start", "tool": echo(1), "next": [{"step": "start", "when": "{{ nope.x > 1 }}"}]})
    assert result.status == "failed" and result.error is not None
    assert result.error["kind"] == "template_failed" and result.error["step"] == "start"


def test_ctx_guided_counter_loop_across_steps(harness: Harness) -> None:
    bump = {"policy": {"rules": [{"else": {"then": {"set_ctx": {"n": "{{ ctx.n | default(0) + 1 }}"}}}}]}}
    result = harness.run(
        {
            "step": "start",
            "tool": {"kind": "noop", "spec": bump},
            "next": [{"step": "start", "when": "{{ ctx.n < 3 }}"}, {"step": "end"}],
        },
        {"step": "end", "tool": echo("{{ ctx.n }}")},
    )
    assert result.ctx == {"n": 3} and result.results["end"] == 3


def test_child_playbook_sees_parent_iter(harness: Harness) -> None:
    child_doc = playbook(
        {
            "step": "start",
            "loop": {"in": "{{ workload.rooms }}", "iterator": "room"},
            "tool": echo("{{ iter.parent.hotel }}-{{ iter.room }}"),
        }
    )
    engine_holder: dict[str, Any] = {}

    def run_child(path: str, args: dict[str, Any]) -> Outcome:
        assert path == "child"
        result = engine_holder["e"].run(child_doc, args, parent_iter={"hotel": args["hotel"]})
        return Outcome.ok(result.results["start"])

    engine = harness.engine(run_child=run_child)
    engine_holder["e"] = engine
    from noetl_cloud.tools.playbook import PlaybookTool

    engine.tools.register(PlaybookTool())  # type: ignore[attr-defined]
    result = engine.run(
        playbook(
            {
                "step": "start",
                "loop": {"in": ["h1", "h2"], "iterator": "hotel"},
                "tool": {"kind": "playbook", "path": "child", "args": {"hotel": "{{ iter.hotel }}", "rooms": [1, 2]}},
            }
        )
    )
    assert result.results["start"] == [["h1-1", "h1-2"], ["h2-1", "h2-2"]]
