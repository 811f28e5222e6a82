"""The maintenance schedule: every job that must run by itself, what it calls and how often.

This is the one place the list lives. Terraform's Cloud Scheduler jobs are generated from it
(``infra/modules/stack/maintenance_schedule.tf``, written by ``make schedule``, which runs
``python -m noetl_cloud.maintenance.schedule``; a unit test fails while the file differs), and the
local stack's scheduler component (:mod:`noetl_cloud.maintenance.scheduler`) runs the same jobs
against the same routes with the same internal auth.

Each job has two cadences: ``schedule``, the cron of its Cloud Scheduler job (Cloud Scheduler runs
at most once a minute; ``var.maintenance_schedules`` overrides it per deployment), and
``local_every_s``, the local scheduler's period (``NOETL_SCHEDULER_EVERY_S`` overrides every job's,
for tests). Pure data: nothing here does I/O.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True)
class Job:
    """One maintenance job: it POSTs ``path`` of ``role`` (the route Terraform names ``route``)."""

    name: str  # the Cloud Scheduler job's name (after the deployment's prefix)
    route: str  # the key of ``local.routes`` in infra/modules/stack/main.tf
    role: str  # the role that serves the route
    path: str
    needs: str  # the role whose work the job does: no job when that role is not deployed
    description: str
    schedule: str  # cron, Etc/UTC
    local_every_s: float
    setting: str  # its key in ``var.maintenance_schedules`` (a deployment's own cron)
    method: str = "POST"


JOBS: Final[tuple[Job, ...]] = (
    Job(
        name="outbox-sweep",
        route="outbox_sweep",
        role="execute",
        path="/api/internal/outbox/sweep",
        needs="execute",
        description="Publish outbox rows whose first publish failed (execute).",
        schedule="* * * * *",
        local_every_s=5.0,
        setting="outbox_sweep",
    ),
    Job(
        name="command-reaper",
        route="command_reaper",
        role="execute",
        path="/api/internal/reaper",
        needs="worker",
        description="Re-issue commands whose claim lease expired; fail them after their attempts (execute).",
        schedule="* * * * *",
        local_every_s=5.0,
        setting="command_reaper",
    ),
    Job(
        name="retention",
        route="retention",
        role="execute",
        path="/api/internal/retention",
        needs="execute",
        description="Keep partitions ahead; archive and remove expired executions; drop old partitions (execute).",
        schedule="23 3 * * *",
        local_every_s=600.0,
        setting="retention",
    ),
    Job(
        name="subscription-tick",
        route="subscription_tick",
        role="execute",
        path="/api/internal/subscriptions/tick",
        needs="execute",
        description="Run the due slot of every active scheduled subscription (activation: scheduled) once (execute).",
        # A subscription's own cadence is evaluated by the tick (control/scheduled.py): this is its resolution.
        schedule="* * * * *",
        local_every_s=2.0,
        setting="subscription_tick",
    ),
    Job(
        name="frame-reaper",
        route="frame_reaper",
        role="frames",
        path="/api/internal/frames/reap",
        needs="frames",
        description="Release expired frame leases (frames).",
        schedule="* * * * *",
        local_every_s=5.0,
        setting="frame_reaper",
    ),
    Job(
        name="projector-catch-up",
        route="projector_catch_up",
        role="projector",
        path="/api/internal/projector/catch-up",
        needs="projector",
        description="Fold executions whose projection fell behind their log with no delivery due (projector).",
        schedule="*/5 * * * *",
        local_every_s=10.0,
        setting="projector_catch_up",
    ),
    Job(
        name="spool-drainer",
        route="spool_drain",
        role="spool_drainer",
        path="/drain",
        needs="spool_drainer",
        description="Drain spooled items whose downstream circuit has closed (spool_drainer).",
        # The net under the drain that a recovered circuit starts at once (docs/spool.md).
        schedule="* * * * *",
        local_every_s=5.0,
        setting="drainer",
    ),
)

TERRAFORM_FILE: Final = Path("infra") / "modules" / "stack" / "maintenance_schedule.tf"


def by_name() -> dict[str, Job]:
    return {job.name: job for job in JOBS}


def _hcl_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("${", "$${") + '"'


def render_terraform(jobs: tuple[Job, ...] = JOBS) -> str:
    """``maintenance_schedule.tf``: the jobs as ``local.maintenance_schedule`` (laid out as ``terraform fmt`` does)."""
    lines = [
        "# Generated from shared/noetl_cloud/maintenance/schedule.py by `make schedule`: do not edit.",
        "# The built-in maintenance jobs; main.tf turns each into a Cloud Scheduler job calling local.routes[route].",
        "locals {",
        "  maintenance_schedule = {",
    ]
    for job in jobs:
        fields = {
            "description": job.description,
            "schedule": job.schedule,
            "setting": job.setting,
            "route": job.route,
            "needs": job.needs,
        }
        width = max(len(k) for k in fields)
        lines.append(f"    {job.name} = {{")
        lines.extend(f"      {k:<{width}} = {_hcl_string(v)}" for k, v in fields.items())
        lines.append("    }")
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) the Terraform file under the checkout given (default: cwd)."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    root = Path(next((a for a in args if not a.startswith("--")), "."))
    target = root / TERRAFORM_FILE
    text = render_terraform()
    if check:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} differs from the maintenance schedule: run `make schedule`", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
