"""The frame lease reaper is scheduled (issue 8): the maintenance schedule (generated into the Terraform
stack) runs a Cloud Scheduler job every minute that POSTs the frames role's ``/api/internal/frames/reap``
with an OIDC token the role accepts.

Read statically from infra/ (the job map is built with ``merge`` and conditionals, so the text is matched);
the route itself is exercised in tests/integration/test_frames_api.py and test_frames_leases.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from noetl_cloud.frames.app import build_app
from noetl_cloud.settings import Settings

INFRA = Path(__file__).resolve().parents[2] / "infra" / "modules"


def _block(text: str, opener: str) -> str:
    """The body of the ``opener { ... }`` block (braces balanced)."""
    at = text.index(opener) + len(opener)
    depth, i = 1, at
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[at : i - 1]


def test_a_scheduler_job_posts_the_frames_reaper_every_minute_with_the_frames_audience() -> None:
    from noetl_cloud.maintenance.schedule import by_name

    stack = (INFRA / "stack" / "main.tf").read_text()
    job = _block((INFRA / "stack" / "maintenance_schedule.tf").read_text(), "frame-reaper = {")
    assert re.search(r'route\s*=\s*"frame_reaper"', job)
    assert re.search(r'needs\s*=\s*"frames"', job)
    assert re.search(r'schedule\s*=\s*"\* \* \* \* \*"', job)
    assert by_name()["frame-reaper"].schedule == "* * * * *"
    route = re.search(r"frame_reaper\s*=\s*\{([^}]*)\}", _block(stack, "routes = {"))
    assert route is not None
    assert 'role = "frames"' in route.group(1) and 'method = "POST"' in route.group(1)
    assert 'path = "/api/internal/frames/reap"' in route.group(1)
    # Every maintenance job calls its route's role at that role's URL, which is the audience too.
    jobs = _block(stack, "scheduler_jobs = merge(")
    assert 'uri         = "${local.url[local.routes[j.route].role]}${local.routes[j.route].path}"' in jobs
    assert "audience    = local.url[local.routes[j.route].role]" in jobs
    assert "for name, j in local.maintenance_schedule" in stack
    # The scheduler's identity may invoke the frames service, and its jobs carry an OIDC token for it.
    iam = (INFRA / "iam" / "main.tf").read_text()
    frames_callers = re.search(r"^\s*frames\s*=\s*\[(.*)\]\s*$", iam, re.M)
    assert frames_callers is not None and '"scheduler"' in frames_callers.group(1)
    assert "scheduler   = [local.sched_member]" in iam
    assert "oidc_token" in (INFRA / "scheduler" / "main.tf").read_text()


def test_the_frames_role_serves_the_route_the_job_calls() -> None:
    from noetl_cloud.auth.internal import InternalAuth

    app = build_app(Settings(environment="test"), service=None, auth=InternalAuth(token="t"))  # type: ignore[arg-type]
    rules = {(r.rule, m) for r in app.url_map.iter_rules() for m in r.methods or ()}
    assert ("/api/internal/frames/reap", "POST") in rules
