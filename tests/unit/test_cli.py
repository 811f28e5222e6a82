from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_cloud.cli import main


def test_downgrade_without_a_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "downgrade"]) == 2
    assert "noetl-cloud: usage: downgrade needs a target revision" in capsys.readouterr().err


def test_configuration_errors_name_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOETL_DATABASE_URL", raising=False)
    monkeypatch.delenv("NOETL_CLOUDSQL_INSTANCE", raising=False)
    assert main(["db", "upgrade"]) == 2
    err = capsys.readouterr().err
    assert "config_missing" in err and "NOETL_DATABASE_URL" in err


def test_unknown_subcommand_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"noetl-cloud {project['version']}\n"


def test_run_shows_each_step_as_it_ends_on_stderr_unless_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    playbook = tmp_path / "two.yaml"
    playbook.write_text(
        "kind: Playbook\nmetadata: {name: two}\nworkflow:\n"
        "  - step: start\n    tool: {kind: noop}\n    next: [{step: finish}]\n"
        "  - step: finish\n    tool: {kind: noop}\n"
    )
    assert main(["run", str(playbook)]) == 0
    captured = capsys.readouterr()
    assert [line.split() for line in captured.err.splitlines()] == [["step.done", "start"], ["step.done", "finish"]]
    assert json.loads(captured.out)["status"] == "completed"
    assert main(["run", str(playbook), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
