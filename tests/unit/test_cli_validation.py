"""A refused document tells the user why: the CLI prints one line per problem the validator found (field
path, problem, canonical fix), whether this process validated it (``run``) or the API did (``execute``
of a file, answered with the JSON error model's details)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from werkzeug.serving import make_server

from noetl_cloud.cli import main
from noetl_cloud.cli.output import error_lines
from noetl_cloud.engine.validate import validate_playbook
from noetl_cloud.errors import BadRequest, ValidationFailed
from noetl_cloud.spec import PlaybookDoc, parse_document
from noetl_cloud.web.errors import register_error_handlers

#: Every non-canonical construct of DSL v2 §12, an unknown root section, an unknown step key, an arc
#: to a step that does not exist and a duplicate step, in one document.
LEGACY = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: legacy}
vars: {a: 1}
triggers: []
workflow:
  - step: start
    when: "{{ workload.go }}"
    tool: {kind: noop, eval: []}
    next:
      - {step: nowhere, expr: "{{ x }}"}
  - step: work
    pipe: [{kind: noop}]
    retry: 3
  - step: work
    case: []
  - step: more
    expr: "{{ x }}"
"""

#: field path -> a word of the canonical fix the line must carry.
EXPECTED = {
    "vars": "workload",
    "triggers": "not a DSL v2 root section",
    "workflow.0.when": "spec.policy.admit.rules",
    "workflow.0.tool.eval": "spec.policy.rules",
    "workflow.0.next.arcs.0.expr": "guard the arc with `when`",
    "workflow.1.pipe": "list the tasks under `tool`",
    "workflow.1.retry": "not a step key",
    "workflow.2.case": "next.arcs",
    "workflow.2.step": "already used by workflow.1",
    "workflow.3.expr": "`when` is the only conditional keyword",
    "workflow.0.next.arcs.0.step": "'nowhere', which is not a step",
}


@pytest.fixture
def legacy_file(tmp_path: Path) -> Path:
    path = tmp_path / "legacy.yaml"
    path.write_text(LEGACY)
    return path


def problem_lines(err: str) -> dict[str, str]:
    """``{field: problem}`` of the indented lines under the error's head line."""
    lines = err.splitlines()
    body = [line.strip() for line in lines[1:] if line.startswith("  ")]
    return dict(line.split(": ", 1) for line in body)


def test_the_document_model_reports_every_problem_in_one_answer() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_document(LEGACY)
    assert {d["field"] for d in info.value.details} == set(EXPECTED)


def test_run_prints_each_problem_on_its_own_line_with_its_fix(
    legacy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(legacy_file)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    head = captured.err.splitlines()[0]
    assert head == f"noetl-cloud: validation_failed: Playbook document failed validation ({len(EXPECTED)} problems):"
    found = problem_lines(captured.err)
    assert set(found) == set(EXPECTED)
    for field, fix in EXPECTED.items():
        assert fix in found[field], (field, found[field])


def test_the_installed_command_prints_the_problems_too(legacy_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "noetl_cloud.cli", "run", str(legacy_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert set(problem_lines(done.stderr)) == set(EXPECTED)


def test_run_refuses_what_registration_refuses_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "kind: Playbook\nmetadata: {name: t}\nworkflow:\n"
        '  - step: start\n    tool: {kind: noop, args: {x: "{{ workload.n + }}"}}\n'
    )
    assert main(["run", str(path), "--events", str(tmp_path / "events.jsonl")]) == 2
    found = problem_lines(capsys.readouterr().err)
    assert list(found) == ["workflow.0.tool.args.x"] and "template syntax error" in found["workflow.0.tool.args.x"]
    assert (tmp_path / "events.jsonl").read_text() == ""


# -- through the API -----------------------------------------------------------------------------------


def registering_api() -> Flask:
    """The catalog's validation behind the API's JSON error model (the database-free half of
    ``POST /api/catalog``: ``CatalogService.register`` runs these two checks first)."""
    app = Flask("catalog")
    register_error_handlers(app)

    @app.post("/api/catalog")
    def register() -> Any:
        document = parse_document(request.get_json()["content"])
        if isinstance(document, PlaybookDoc):
            validate_playbook(document)
        return {"path": document.path}, 201

    return app


@pytest.fixture
def api_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, registering_api(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("NOETL_INTERNAL_API_TOKEN", "test-token")
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def test_execute_of_a_file_prints_the_problems_the_api_answered(
    legacy_file: Path, api_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["execute", str(legacy_file), "--api-url", api_url]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("noetl-cloud: validation_failed: Playbook document failed validation")
    found = problem_lines(err)
    assert set(found) == set(EXPECTED)
    assert "workload" in found["vars"] and "spec.policy.admit.rules" in found["workflow.0.when"]


def test_api_error_details_carry_field_problem_and_type(legacy_file: Path) -> None:
    response = registering_api().test_client().post("/api/catalog", json={"content": legacy_file.read_text()})
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "validation_failed"
    assert {d["field"]: d["type"] for d in error["details"]}["workflow.1.retry"] == "unknown_key"
    assert all(set(d) == {"field", "problem", "type"} for d in error["details"])


# -- the error lines themselves ------------------------------------------------------------------------


def test_error_lines_without_problems_are_the_head_line_alone() -> None:
    assert error_lines(BadRequest("bad", code="usage")) == ["noetl-cloud: usage: bad"]


def test_error_lines_show_the_scalar_details_of_a_mapping() -> None:
    exc = BadRequest("tenant_id is required", code="missing_parameter", details={"parameter": "tenant_id", "x": [1]})
    assert error_lines(exc) == ["noetl-cloud: missing_parameter: tenant_id is required", "  parameter: tenant_id"]


def test_a_single_problem_is_counted_in_the_singular() -> None:
    exc = ValidationFailed("refused", details=[{"field": "", "problem": "not YAML", "type": "yaml_syntax"}])
    assert error_lines(exc) == ["noetl-cloud: validation_failed: refused (1 problem):", "  $: not YAML"]


def test_subscribe_prints_the_problems_of_a_refused_subscription(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sub.yaml"
    path.write_text(
        "apiVersion: noetl.io/v1\nkind: Subscription\nmetadata: {name: s}\nspec: {source: pubsub, bogus: 1}\n"
    )
    events = tmp_path / "events.jsonl"
    assert main(["subscribe", str(path), "--local", "--events", str(events), "--max-messages", "1"]) == 2
    err = capsys.readouterr().err
    assert f"noetl-cloud: invalid_subscription: {path} is not a valid Subscription (" in err
    found = problem_lines(err)
    assert "spec.bogus" in found and "spec.dispatch" in found
