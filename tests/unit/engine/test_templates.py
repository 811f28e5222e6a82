from __future__ import annotations

import pytest

from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope


@pytest.fixture
def renderer() -> Renderer:
    return Renderer()


def test_exact_expression_keeps_its_type(renderer: Renderer) -> None:
    scope = build_scope(workload={"n": 3, "items": [1, 2], "flag": False, "obj": {"a": 1}})
    assert renderer.render("{{ workload.n }}", scope) == 3
    assert renderer.render("  {{ workload.items }} ", scope) == [1, 2]
    assert renderer.render("{{ workload.flag }}", scope) is False
    assert renderer.render("{{ workload.obj }}", scope) == {"a": 1}
    assert renderer.render("{{ workload.n + 1 }}", scope) == 4


def test_mixed_text_renders_to_a_string(renderer: Renderer) -> None:
    scope = build_scope(workload={"api": "https://x", "n": 3})
    assert renderer.render("{{ workload.api }}/p/{{ workload.n }}", scope) == "https://x/p/3"
    assert renderer.render("plain text", scope) == "plain text"


def test_string_that_looks_numeric_stays_a_string(renderer: Renderer) -> None:
    assert renderer.render("{{ workload.code }}", build_scope(workload={"code": "0012"})) == "0012"


def test_dicts_and_lists_render_recursively_keys_untouched(renderer: Renderer) -> None:
    scope = build_scope(workload={"n": 2})
    value = {"{{ k }}": ["{{ workload.n }}", {"x": "{{ workload.n * 2 }}"}, 7]}
    assert renderer.render(value, scope) == {"{{ k }}": [2, {"x": 4}, 7]}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("{{ workload.missing | default(5) }}", 5),
        ("{{ workload.a.b.c | default('z') }}", "z"),
        ("{{ '7' | int }}", 7),
        ("{{ '1.5' | float }}", 1.5),
        ("{{ workload.items | length }}", 2),
        ("{{ workload.items | tojson }}", "[1, 2]"),
    ],
)
def test_filters(renderer: Renderer, expr: str, expected: object) -> None:
    assert renderer.render(expr, build_scope(workload={"items": [1, 2]})) == expected


def test_bare_names_read_args_then_ctx_then_iter_then_workload(renderer: Renderer) -> None:
    scope = build_scope(
        workload={"a": "w", "b": "w", "c": "w", "d": "w"},
        iter_scope={"a": "i", "b": "i", "c": "i"},
        ctx={"a": "c", "b": "c"},
        args={"a": "args"},
    )
    assert [renderer.render("{{ " + name + " }}", scope) for name in "abcd"] == ["args", "c", "i", "w"]


def test_namespaces_win_over_bare_names(renderer: Renderer) -> None:
    scope = build_scope(workload={"ctx": "shadow"}, ctx={"k": 1})
    assert renderer.render("{{ ctx.k }}", scope) == 1


def test_iter_is_absent_outside_a_loop(renderer: Renderer) -> None:
    with pytest.raises(TemplateFailure):
        renderer.render("{{ iter.page }}", build_scope())


def test_nested_iter_parent(renderer: Renderer) -> None:
    scope = build_scope(iter_scope={"room": 2, "parent": {"hotel": "h1", "parent": {"city": "c"}}})
    assert renderer.render("{{ iter.parent.hotel }}-{{ iter.parent.parent.city }}", scope) == "h1-c"


def test_undefined_name_fails_naming_step_task_and_expression(renderer: Renderer) -> None:
    with pytest.raises(TemplateFailure) as info:
        renderer.render("{{ nope + 1 }}", build_scope(), step="fetch", task="page")
    failure = info.value
    assert failure.step == "fetch" and failure.task == "page" and failure.expression == "{{ nope + 1 }}"
    assert "'nope' is undefined" in failure.message and "step 'fetch'" in failure.message
    assert failure.code == "template_failed"


def test_syntax_error_and_runtime_error_are_template_failures(renderer: Renderer) -> None:
    with pytest.raises(TemplateFailure):
        renderer.render("{{ 1 + }}", build_scope())
    with pytest.raises(TemplateFailure) as info:
        renderer.render("{{ 1 / 0 }}", build_scope())
    assert "ZeroDivisionError" in info.value.reason


def test_sandbox_blocks_unsafe_attributes(renderer: Renderer) -> None:
    with pytest.raises(TemplateFailure):
        renderer.render("{{ ''.__class__.__mro__[1].__subclasses__() }}", build_scope())


@pytest.mark.parametrize(
    ("condition", "expected"),
    [(None, True), (True, True), (False, False), ("{{ 1 == 1 }}", True), ("{{ 0 }}", False), ("false", False)],
)
def test_truth(renderer: Renderer, condition: object, expected: bool) -> None:
    assert renderer.truth(condition, build_scope()) is expected


@pytest.mark.parametrize(
    "expr",
    ["{{ workload.items.append(3) }}", "{{ workload.obj.update({'b': 2}) }}", "{{ workload.items.pop() }}"],
)
def test_a_template_cannot_change_what_it_reads(renderer: Renderer, expr: str) -> None:
    workload = {"items": [1, 2], "obj": {"a": 1}}
    with pytest.raises(TemplateFailure):
        renderer.render(expr, build_scope(workload=workload))
    assert workload == {"items": [1, 2], "obj": {"a": 1}}  # the control plane shares it between reports
