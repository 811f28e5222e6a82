"""Malformed playbooks are refused at registration, each naming the problem and its location.

Registration runs the document model (spec/playbook.py) and then the engine's own checks
(engine/validate.py): policies, jump labels, loops and the syntax of every template.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from noetl_cloud.engine.validate import validate_playbook
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.spec import parse_document

NOOP = {"kind": "noop"}


def playbook(steps: list[dict[str, Any]], **root: Any) -> str:
    doc = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t", "path": "t/t"},
        "workflow": steps,
        **root,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def rule(then: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "step": "start",
            "tool": [{"fetch": {**NOOP, "spec": {"policy": {"rules": [{"when": "{{ true }}", "then": then}]}}}}],
        }
    ]


def looped(spec: dict[str, Any] | None = None, **loop: Any) -> list[dict[str, Any]]:
    body = {"in": "{{ workload.items }}", "iterator": "item", **loop}
    if spec is not None:
        body["spec"] = spec
    return [{"step": "start", "loop": body, "tool": NOOP}]


CASES = [
    ("root vars", playbook([{"step": "start", "tool": NOOP}], vars={"a": 1}), "vars", "workload"),
    ("unknown root section", playbook([{"step": "start", "tool": NOOP}], triggers=[]), "triggers", "root section"),
    ("empty workflow", playbook([]), "workflow", "at least 1"),
    ("step-level when", playbook([{"step": "start", "when": "{{ x }}", "tool": NOOP}]), "workflow.0.when", "spec"),
    ("legacy pipe", playbook([{"step": "start", "pipe": [NOOP]}]), "workflow.0.pipe", "pipeline"),
    ("legacy eval", playbook([{"step": "start", "tool": NOOP, "eval": [{"expr": "x"}]}]), "workflow.0.eval", "outcome"),
    ("step-level case", playbook([{"step": "start", "tool": NOOP, "case": []}]), "workflow.0.case", "next.arcs"),
    (
        "arc to an unknown step",
        playbook([{"step": "start", "tool": NOOP, "next": {"arcs": [{"step": "nowhere"}]}}]),
        "workflow.0.next.arcs.0.step",
        "nowhere",
    ),
    (
        "duplicate step name",
        playbook([{"step": "start", "tool": NOOP}, {"step": "start", "tool": NOOP}]),
        "workflow.1.step",
        "already used",
    ),
    ("invalid step name", playbook([{"step": "has space", "tool": NOOP}]), "workflow.0.step", "pattern"),
    ("jump to an unknown label", playbook(rule({"do": "jump", "to": "nope"})), "start.tool.fetch", "nope"),
    (
        "unknown policy directive",
        playbook(rule({"do": "explode"})),
        "start.tool.0.fetch.spec.policy.rules.0.then.do",
        "continue, retry, jump, break, fail",
    ),
    (
        "unknown backoff",
        playbook(rule({"do": "retry", "backoff": "random"})),
        "start.tool.0.fetch.spec.policy.rules.0.then.backoff",
        "linear",
    ),
    (
        "duplicate task label",
        playbook([{"step": "start", "tool": [{"a": NOOP}, {"a": NOOP}]}]),
        "start.tool",
        "used twice",
    ),
    (
        "task without a kind",
        playbook([{"step": "start", "tool": [{"a": {"url": "x"}}]}]),
        "start.tool.0.a.kind",
        "kind",
    ),
    (
        "loop without an iterator",
        playbook([{"step": "start", "loop": {"in": "{{ w }}"}, "tool": NOOP}]),
        "start.loop",
        "iterator",
    ),
    ("unknown loop mode", playbook(looped({"mode": "sideways"})), "start.loop.spec.mode", "sequential or parallel"),
    (
        "zero max_in_flight",
        playbook(looped({"mode": "parallel", "max_in_flight": 0})),
        "start.loop.spec.max_in_flight",
        "positive",
    ),
    (
        "bad template syntax in a tool",
        playbook([{"step": "start", "tool": {"kind": "http", "url": "{{ w.url "}}]),
        "workflow.0.tool.url",
        "template syntax error",
    ),
    (
        "bad template syntax in an arc",
        playbook(
            [
                {"step": "start", "tool": NOOP, "next": {"arcs": [{"step": "end", "when": "{% if %}"}]}},
                {"step": "end", "tool": NOOP},
            ]
        ),
        "workflow.0.next.arcs.0.when",
        "template syntax error",
    ),
]


@pytest.mark.parametrize(("text", "field", "keyword"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_playbook_is_refused_naming_problem_and_location(text: str, field: str, keyword: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_playbook(parse_document(text))  # type: ignore[arg-type]
    assert info.value.status == 422
    problems = {d["field"]: d["problem"] for d in info.value.details}
    assert field in problems, problems
    assert keyword in problems[field]


def test_the_malformed_set_is_large_enough() -> None:
    assert len(CASES) >= 15


def test_python_code_and_sql_are_not_checked_as_templates() -> None:
    text = playbook(
        [
            {
                "step": "start",
                "tool": [
                    {"py": {"kind": "python", "code": "def main():\n    return '{{ not a template'"}},
                    {"pg": {"kind": "postgres", "auth": "pg", "command": "SELECT '{{'"}},
                ],
            }
        ]
    )
    validate_playbook(parse_document(text))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("section", "value", "reason"),
    [
        ("executor", {"kind": "distributed", "spec": {"pool": "default"}}, "execution_pool"),
        ("workbook", {"tasks": {"fetch": {"kind": "http"}}}, "child playbook"),
    ],
)
def test_a_root_section_this_runtime_does_not_implement_is_refused_with_the_reason(
    section: str, value: dict[str, Any], reason: str
) -> None:
    doc = parse_document(playbook([{"step": "start", "tool": NOOP}], **{section: value}))
    with pytest.raises(ValidationFailed) as info:
        validate_playbook(doc)  # type: ignore[arg-type]
    (found,) = info.value.details
    assert (found["field"], found["type"]) == (section, "unsupported_section")
    assert "not supported by this runtime" in found["problem"] and reason in found["problem"]


def test_an_empty_workbook_like_the_specs_example_changes_nothing_and_is_accepted() -> None:
    validate_playbook(parse_document(playbook([{"step": "start", "tool": NOOP}], workbook={"tasks": {}})))  # type: ignore[arg-type]
