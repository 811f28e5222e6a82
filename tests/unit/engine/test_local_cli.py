"""``noetl-cloud run``: runs a playbook file, prints the outcome, exits 0 only on playbook.completed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_cloud.cli import main
from noetl_cloud.engine.local import parse_sets
from noetl_cloud.errors import BadRequest

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: { name: cli }
workload: { n: 1, fail: false }
workflow:
  - step: start
    tool:
      kind: python
      args: { n: "{{ workload.n }}", fail: "{{ workload.fail }}" }
      code: |
        def main(n, fail):
            if fail:
                raise RuntimeError("asked")
            return n * 3
"""


@pytest.fixture
def playbook_file(tmp_path: Path) -> Path:
    path = tmp_path / "cli.yaml"
    path.write_text(PLAYBOOK)
    return path


def test_run_prints_outcome_and_writes_events(
    playbook_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "out.jsonl"
    assert main(["run", str(playbook_file), "--set", "n=7", "--events", str(events)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed" and printed["results"] == {"start": 21}
    types = [json.loads(line)["event_type"] for line in events.read_text().splitlines()]
    assert types[0] == "playbook.started" and types[-1] == "playbook.completed"


def test_run_exits_1_when_the_playbook_fails(playbook_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(playbook_file), "--set", "fail=true"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "failed" and "RuntimeError" in printed["error"]["error"]["message"]


def test_run_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "not_found" in capsys.readouterr().err


def test_run_invalid_playbook_is_a_validation_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: b}\nworkflow: []\n")
    assert main(["run", str(path)]) == 2
    assert "validation_failed" in capsys.readouterr().err


def test_parse_sets_reads_yaml_scalars_and_nests_dotted_keys() -> None:
    assert parse_sets(["a=1", "b=true", "c=x", "d.e=2.5", "d.f=[1, 2]", "g="]) == {
        "a": 1,
        "b": True,
        "c": "x",
        "d": {"e": 2.5, "f": [1, 2]},
        "g": "",
    }
    with pytest.raises(BadRequest):
        parse_sets(["novalue"])


def test_child_playbook_files_run_relative_to_the_parent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "child.yaml").write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: child}\nworkload: {x: 0}\n"
        "workflow:\n  - step: start\n    tool: {kind: noop, result: '{{ workload.x * 2 }}'}\n"
    )
    parent = tmp_path / "parent.yaml"
    parent.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: parent}\n"
        "workflow:\n  - step: start\n    tool: {kind: playbook, path: child, args: {x: 21}}\n"
    )
    assert main(["run", str(parent)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (
        printed["results"]["start"]["results"] == {"start": 42} and printed["results"]["start"]["status"] == "completed"
    )


_PG_PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keyed}
keychain:
  - {name: pg_x, kind: postgres_credential}
workflow:
  - step: start
    tool: {kind: postgres, auth: pg_x, query: "SELECT 1"}
"""


def test_run_keychain_file_reaches_the_tools_and_secrets_are_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    playbook = tmp_path / "keyed.yaml"
    playbook.write_text(_PG_PLAYBOOK)
    keychain = tmp_path / "keychain.json"  # JSON is YAML: either works
    keychain.write_text(json.dumps({"pg_x": {"kind": "http_credential", "password": "s3cret-value"}}))
    events = tmp_path / "out.jsonl"
    assert main(["run", str(playbook), "--keychain", str(keychain), "--events", str(events)]) == 1
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    # bad_credential (not unknown_credential): the tool found the alias in the file's keychain
    assert printed["error"]["error"]["kind"] == "bad_credential"
    assert "s3cret-value" not in captured.out + captured.err + events.read_text()

    assert main(["run", str(playbook)]) == 1  # without --keychain the alias is unknown
    assert json.loads(capsys.readouterr().out)["error"]["error"]["kind"] == "unknown_credential"


@pytest.mark.parametrize("content", ["- s3cret-value\n", "pg_x: s3cret-value\n", "{pg_x: [s3cret-value\n"])
def test_run_bad_keychain_file_is_a_usage_error_that_does_not_echo_it(
    content: str, playbook_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keychain = tmp_path / "keychain.yaml"
    keychain.write_text(content)
    assert main(["run", str(playbook_file), "--keychain", str(keychain)]) == 2
    captured = capsys.readouterr()
    assert "usage" in captured.err and "s3cret-value" not in captured.out + captured.err


def test_run_missing_keychain_file_is_a_usage_error(
    playbook_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(playbook_file), "--keychain", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
