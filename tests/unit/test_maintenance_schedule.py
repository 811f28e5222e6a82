"""The maintenance schedule is one list (noetl_cloud.maintenance.schedule), and Terraform runs exactly it.

* ``infra/modules/stack/maintenance_schedule.tf`` is what ``make schedule`` renders from the list
  (a job added, removed or re-timed in Python without regenerating fails here);
* every job's route in Python is the route of the same name in ``local.routes`` (role, method, path);
* the stack builds its Cloud Scheduler jobs from ``local.maintenance_schedule`` and lets
  ``var.maintenance_schedules`` override only the jobs' own keys.
"""

from __future__ import annotations

from pathlib import Path

from noetl_cloud.maintenance import schedule
from tests.unit.test_infra import STACK, _parse

ROOT = Path(__file__).resolve().parents[2]


def _locals(path: Path) -> dict[str, object]:
    return {k: v for block in _parse(path).get("locals", []) for k, v in block.items()}


def test_the_terraform_file_is_the_rendered_schedule() -> None:
    assert (ROOT / schedule.TERRAFORM_FILE).read_text() == schedule.render_terraform()
    assert schedule.main([str(ROOT), "--check"]) == 0


def test_check_fails_when_the_file_differs(tmp_path: Path) -> None:
    target = tmp_path / schedule.TERRAFORM_FILE
    target.parent.mkdir(parents=True)
    target.write_text(schedule.render_terraform().replace("*/5 * * * *", "*/7 * * * *"))
    assert schedule.main([str(tmp_path), "--check"]) == 1
    assert schedule.main([str(tmp_path)]) == 0
    assert schedule.main([str(tmp_path), "--check"]) == 0


def test_terraform_reads_the_same_jobs_as_python() -> None:
    parsed = _locals(STACK / "maintenance_schedule.tf")["maintenance_schedule"]
    assert isinstance(parsed, dict)
    assert set(parsed) == {job.name for job in schedule.JOBS}
    for job in schedule.JOBS:
        entry = parsed[job.name]
        assert entry["route"] == job.route and entry["schedule"] == job.schedule and entry["needs"] == job.needs
        assert entry["setting"] == job.setting


def test_every_job_calls_the_route_terraform_names_for_it() -> None:
    routes = _locals(STACK / "main.tf")["routes"]
    assert isinstance(routes, dict)
    for job in schedule.JOBS:
        route = routes[job.route]
        assert (route["role"], route["method"], route["path"]) == (job.role, job.method, job.path), job.name


def test_the_stack_builds_its_jobs_from_the_schedule_and_overrides_only_known_keys() -> None:
    text = (STACK / "main.tf").read_text()
    assert "for name, j in local.maintenance_schedule : name => merge(j, {" in text
    assert "lookup(var.maintenance_schedules, j.setting, j.schedule)" in text
    variables = (STACK / "variables.tf").read_text()
    block = variables[variables.index('variable "maintenance_schedules"') :]
    block = block[: block.index("\nvariable ")]
    for job in schedule.JOBS:
        assert f'"{job.setting}"' in block


def test_every_job_has_a_local_cadence_and_a_cron() -> None:
    for job in schedule.JOBS:
        assert job.local_every_s > 0
        assert len(job.schedule.split()) == 5
