"""``noetl-cloud local status`` from any folder: it finds the checkout's state folder, names it, and lists
every backing service and every role, running or not (also after ``local down``). No process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_cloud.cli import main
from noetl_cloud.local.layout import ORDER, ROLE_PORTS, SCHEDULER, default_state_dir, project_root
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.maintenance.schedule import JOBS

ROOT = Path(__file__).resolve().parents[2]
ROLES = [r for r in ROLE_PORTS if (ROOT / "functions" / r / "main.py").exists()]
PORT_BASE = "29430"  # nothing of this test listens; status only probes recorded processes


def test_the_checkout_is_found_from_inside_it_and_from_anywhere_else(tmp_path: Path) -> None:
    assert project_root(ROOT / "shared" / "noetl_cloud" / "local") == ROOT
    assert project_root(tmp_path) == ROOT  # outside any checkout: the one this package is installed from
    assert default_state_dir({}, start=tmp_path) == ROOT / "local" / ".state"
    assert default_state_dir({"NOETL_LOCAL_STATE_DIR": str(tmp_path)}, start=ROOT) == tmp_path


def test_a_stack_built_in_another_folder_knows_the_checkouts_roles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert LocalStack.from_env({"NOETL_LOCAL_STATE_DIR": str(tmp_path / "state")}).available_roles() == ROLES


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder outside the checkout, and the working directory somewhere else again."""
    state = tmp_path / "state"
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NOETL_LOCAL_STATE_DIR", str(state))
    monkeypatch.setenv("NOETL_LOCAL_PORT_BASE", PORT_BASE)
    return state


def test_status_of_a_folder_never_started_names_it_and_lists_services_and_roles_stopped(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["local", "status"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"state folder {elsewhere} (nothing recorded: never started here)"
    blank = lines.index("")
    rows = [line.split() for line in lines[2:blank]]
    assert [row[0] for row in rows] == [*ORDER, *ROLES, SCHEDULER]
    assert {row[1] for row in rows[: len(ORDER)]} == {"service"}
    assert {row[1] for row in rows[len(ORDER) : -1]} == {"role"} and rows[-1][1] == "scheduler"
    assert all(row[4] == "stopped" for row in rows)
    # The maintenance schedule follows: every job, its local period and its cloud cron, never run.
    assert lines[blank + 1] == "maintenance schedule (scheduler not running)"
    jobs = [line.split() for line in lines[blank + 3 :]]
    assert [row[0] for row in jobs] == [job.name for job in JOBS]
    assert [row[1] for row in jobs] == [f"{job.local_every_s:g}s" for job in JOBS]


def test_status_after_down_still_lists_the_roles(elsewhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere.mkdir()
    # What `down` leaves: stack.json with nothing recorded; and a role whose process is gone.
    (elsewhere / "stack.json").write_text(json.dumps({"components": {"worker": {"pid": 2**22 + 7, "port": 1}}}))
    assert main(["local", "status", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [*ORDER, *ROLES, SCHEDULER]
    assert [r["kind"] for r in rows] == ["service"] * len(ORDER) + ["role"] * len(ROLES) + ["scheduler"]
    assert not any(r["running"] or r["healthy"] or r["pid"] for r in rows)
    assert main(["local", "status"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"state folder {elsewhere}" and "healthy" not in out


def test_the_default_status_lists_only_the_roles_the_folder_recorded(elsewhere: Path) -> None:
    stack = LocalStack.from_env({"NOETL_LOCAL_STATE_DIR": str(elsewhere), "NOETL_LOCAL_PORT_BASE": PORT_BASE})
    assert [r.name for r in stack.status()] == list(ORDER)  # what the test fixture's "already up" reads
    assert [r.name for r in stack.status(every_role=True)] == [*ORDER, *ROLES, SCHEDULER]


@pytest.mark.parametrize(("worker_recorded", "code"), [(False, 0), (True, 1)])
def test_a_stack_up_without_roles_is_up_and_a_recorded_role_that_died_is_not(
    worker_recorded: bool, code: int, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noetl_cloud.local.status import ComponentStatus

    def status(self: LocalStack, *, every_role: bool = False) -> list[ComponentStatus]:
        services = [ComponentStatus(n, 1, 10, True, True, 0.5, "service", True) for n in ORDER]
        worker = ComponentStatus("worker", 2, None, False, False, None, "role", worker_recorded)
        return [*services, worker]

    monkeypatch.setattr(LocalStack, "status", status)
    assert main(["local", "status"]) == code


def test_up_with_an_unknown_optional_component_is_refused_before_anything_starts(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["local", "up", "--with", "kafka,zookeeper"]) == 2
    assert "unknown optional component(s) zookeeper: --with takes kafka" in capsys.readouterr().out
    assert not elsewhere.exists()  # nothing was started, nothing recorded


def test_a_recorded_kafka_broker_that_died_is_listed_and_makes_status_fail(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere.mkdir()
    (elsewhere / "kafka.json").write_text(json.dumps({"pid": 2**22 + 7, "port": 1, "startup_seconds": 0.1}))
    assert main(["local", "status", "--json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["kafka"]["kind"] == "service" and rows["kafka"]["recorded"] and not rows["kafka"]["running"]
    assert main(["local", "down"]) == 0
    assert not (elsewhere / "kafka.json").exists()
