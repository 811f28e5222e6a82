from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl_cloud.spec import PlaybookDoc, parse_document
from tests.unit.spec_support import problem_at, rejection

SPECS = Path(__file__).resolve().parent.parent / "data" / "specs"


def load(name: str = "playbook_example.yaml") -> dict[str, Any]:
    data = yaml.safe_load((SPECS / name).read_text())
    assert isinstance(data, dict)
    return copy.deepcopy(data)


def minimal(*steps: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "t"}, "workflow": list(steps), **root}


def parse(doc: dict[str, Any]) -> PlaybookDoc:
    parsed = parse_document(yaml.safe_dump(doc, sort_keys=False))
    assert isinstance(parsed, PlaybookDoc)
    return parsed


# -- valid documents ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["playbook_example.yaml", "playbook_drain_telemetry.yaml"])
def test_example_playbooks_parse(name: str) -> None:
    doc = parse_document((SPECS / name).read_text())
    assert isinstance(doc, PlaybookDoc) and doc.kind == "Playbook"


def test_example_keeps_root_sections_and_step_internals() -> None:
    doc = parse(load())
    assert doc.path == "examples/example" and doc.metadata.version == "2.0"
    assert doc.workload["api_url"] == "https://example.com" and doc.keychain[0]["name"] == "pg_k8s"
    assert doc.executor is not None and doc.executor["kind"] == "distributed" and doc.workbook == {"tasks": {}}
    step = doc.step("fetch_transform_store")
    assert isinstance(step.tool, list) and [next(iter(task)) for task in step.tool] == [
        "init",
        "fetch_page",
        "save_page",
        "paginate",
    ]
    assert step.loop is not None and step.loop["iterator"] == "endpoint"
    assert step.next is not None and step.next.spec.mode == "exclusive"
    assert [(arc.step, arc.when) for arc in step.next.arcs] == [
        ("validate_results", "{{ event.name == 'loop.done' }}"),
        ("cleanup", None),
    ]
    assert doc.step("validate_results").targets() == ["cleanup"]


def test_entry_step_is_start_when_present() -> None:
    doc = parse(load())
    assert doc.entry_step() == "start"
    assert doc.step_names() == ["start", "fetch_transform_store", "validate_results", "cleanup"]


def test_entry_step_is_the_first_step_without_start() -> None:
    doc = parse(load("playbook_drain_telemetry.yaml"))
    assert doc.entry_step() == "drain_telemetry" and doc.step_names() == ["drain_telemetry", "process_batch"]
    moved = parse(minimal({"step": "first"}, {"step": "start"}))
    assert moved.entry_step() == "start"


def test_path_falls_back_to_the_name() -> None:
    assert parse(load("playbook_drain_telemetry.yaml")).path == "drain_telemetry"


def test_a_bare_list_of_arcs_is_read_as_an_exclusive_router() -> None:
    step = parse(load("playbook_drain_telemetry.yaml")).step("drain_telemetry")
    assert step.next is not None and step.next.spec.mode == "exclusive"
    assert [arc.step for arc in step.next.arcs] == ["process_batch"]


def test_inclusive_router_and_arc_inscription_are_kept() -> None:
    doc = parse(
        minimal(
            {
                "step": "start",
                "next": {
                    "spec": {"mode": "inclusive"},
                    "arcs": [{"step": "a", "when": "{{ ctx.x }}", "args": {"n": 1}}, {"step": "b"}],
                },
            },
            {"step": "a"},
            {"step": "b"},
        )
    )
    router = doc.step("start").next
    assert router is not None and router.spec.mode == "inclusive" and router.arcs[0].args == {"n": 1}


def test_an_arc_guard_may_be_a_boolean() -> None:
    router = parse(minimal({"step": "start", "next": [{"step": "start", "when": False}]})).workflow[0].next
    assert router is not None and router.arcs[0].when is False


def test_a_pipeline_task_may_be_labeled_eval() -> None:
    doc = parse(minimal({"step": "start", "tool": [{"eval": {"kind": "python", "code": "x = 1"}}]}))
    assert doc.workflow[0].tool == [{"eval": {"kind": "python", "code": "x = 1"}}]


def test_missing_api_version_defaults_to_v2() -> None:
    doc = minimal({"step": "start"})
    del doc["apiVersion"]
    assert parse(doc).apiVersion == "noetl.io/v2"


# -- the root is strict ----------------------------------------------------------------------------------


def test_root_vars_are_rejected_with_their_replacement() -> None:
    found = problem_at(rejection(minimal({"step": "start"}, vars={"x": 1})), "vars")
    assert found["type"] == "non_canonical"
    assert "workload" in found["problem"] and "set_ctx" in found["problem"]


@pytest.mark.parametrize(
    "edit,field",
    [
        pytest.param({"steps": []}, "steps", id="unknown-root-key"),
        pytest.param({"kind": "Playbook", "workflow": []}, "workflow", id="empty-workflow"),
        pytest.param({"workload": ["not", "a", "mapping"]}, "workload", id="workload-not-mapping"),
        pytest.param({"metadata": {"path": "a/b"}}, "metadata.name", id="no-name"),
        pytest.param({"metadata": {"name": "t", "owner": "me"}}, "metadata.owner", id="unknown-metadata-key"),
        pytest.param({"apiVersion": "v2"}, "apiVersion", id="foreign-api-version"),
    ],
)
def test_root_shape_violations_name_the_field(edit: dict[str, Any], field: str) -> None:
    problem_at(rejection({**minimal({"step": "start"}), **edit}), field)


def test_missing_workflow_is_rejected() -> None:
    doc = minimal({"step": "start"})
    del doc["workflow"]
    assert problem_at(rejection(doc), "workflow")["type"] == "missing"


# -- steps -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,value,replacement",
    [
        ("pipe", [{"kind": "http"}], "tool"),
        ("eval", [{"expr": "{{ x }}", "do": "retry"}], "spec.policy.rules"),
        ("expr", "{{ x > 1 }}", "when"),
        ("when", "{{ x > 1 }}", "spec.policy.admit.rules"),
        ("case", [{"when": "{{ x }}", "then": {"next": [{"step": "start"}]}}], "next.arcs"),
    ],
)
def test_non_canonical_step_constructs_name_their_replacement(key: str, value: Any, replacement: str) -> None:
    doc = minimal({"step": "start", "next": [{"step": "work"}]}, {"step": "work", key: value})
    found = problem_at(rejection(doc), f"workflow.1.{key}")
    assert found["type"] == "non_canonical" and replacement in found["problem"]


@pytest.mark.parametrize(
    "tool,field",
    [
        pytest.param({"kind": "http", "eval": [{"expr": "x"}]}, "workflow.0.tool.eval", id="task"),
        pytest.param([{"fetch": {"kind": "http", "eval": []}}], "workflow.0.tool.0.fetch.eval", id="labeled-task"),
        pytest.param([{"kind": "http", "pipe": []}], "workflow.0.tool.0.pipe", id="unlabeled-task"),
    ],
)
def test_legacy_eval_inside_a_tool_task_is_rejected(tool: Any, field: str) -> None:
    found = problem_at(rejection(minimal({"step": "start", "tool": tool})), field)
    assert found["type"] == "non_canonical"


@pytest.mark.parametrize(
    "arc,field,replacement",
    [
        ({"step": "start", "expr": "{{ x }}"}, "workflow.0.next.arcs.0.expr", "when"),
        ({"when": "{{ x }}", "then": [{"step": "start"}]}, "workflow.0.next.arcs.0.then", "its own arc"),
    ],
)
def test_legacy_arc_forms_name_the_canonical_arc(arc: dict[str, Any], field: str, replacement: str) -> None:
    found = problem_at(rejection(minimal({"step": "start", "next": {"arcs": [arc]}})), field)
    assert found["type"] == "non_canonical" and replacement in found["problem"]


def test_arcs_to_unknown_steps_are_rejected() -> None:
    doc = load()
    doc["workflow"][2]["next"]["arcs"][0]["step"] = "clean_up"
    found = problem_at(rejection(doc), "workflow.2.next.arcs.0.step")
    assert found["type"] == "unknown_step" and "clean_up" in found["problem"]


def test_duplicate_step_names_are_rejected_at_the_second_use() -> None:
    details = rejection(minimal({"step": "start"}, {"step": "load"}, {"step": "load"}))
    found = problem_at(details, "workflow.2.step")
    assert found["type"] == "duplicate_step" and "workflow.1" in found["problem"]
    assert "workflow.1.step" not in {d["field"] for d in details}


def test_routing_problems_are_reported_together() -> None:
    doc = minimal({"step": "start", "next": [{"step": "nowhere"}]}, {"step": "start"})
    assert {"workflow.0.next.arcs.0.step", "workflow.1.step"} <= {d["field"] for d in rejection(doc)}


@pytest.mark.parametrize(
    "step,field",
    [
        pytest.param({"step": "fetch-page"}, "workflow.0.step", id="name-with-dash"),
        pytest.param({"step": "9lives"}, "workflow.0.step", id="name-starts-with-digit"),
        pytest.param({"desc": "no name"}, "workflow.0.step", id="no-name"),
        pytest.param({"step": "start", "tool": "http"}, "workflow.0.tool", id="tool-scalar"),
        pytest.param({"step": "start", "tool": ["http"]}, "workflow.0.tool", id="tool-list-of-scalars"),
        pytest.param({"step": "start", "loop": "items"}, "workflow.0.loop", id="loop-scalar"),
        pytest.param({"step": "start", "next": {"arcs": []}}, "workflow.0.next.arcs", id="router-without-arcs"),
        pytest.param({"step": "start", "next": "start"}, "workflow.0.next", id="router-scalar"),
        pytest.param(
            {"step": "start", "next": {"spec": {"mode": "all"}, "arcs": [{"step": "start"}]}},
            "workflow.0.next.spec.mode",
            id="router-mode",
        ),
        pytest.param({"step": "start", "args": {"x": 1}}, "workflow.0.args", id="unknown-step-key"),
        pytest.param(
            {"step": "start", "next": [{"step": "start", "when": ["x"]}]}, "workflow.0.next.arcs.0.when", id="guard"
        ),
    ],
)
def test_step_shape_violations_name_the_field(step: dict[str, Any], field: str) -> None:
    problem_at(rejection(minimal(step)), field)


def test_tool_shape_problem_is_one_readable_message() -> None:
    details = rejection(minimal({"step": "start", "tool": 42}))
    assert details == [
        {
            "field": "workflow.0.tool",
            "problem": "tool is one task (a mapping) or a pipeline (a list of labeled tasks)",
            "type": "tool_shape",
        }
    ]
