"""The frame lease reaper is scheduled (issue 8): the Terraform stack runs a Cloud Scheduler job every
minute that POSTs the frames role's ``/api/internal/frames/reap`` with an OIDC token the role accepts.

Read statically from infra/ (the job map is built with ``merge`` and conditionals, so the text is matched);
the route itself is exercised in tests/integration/test_frames_api.py and test_frames_leases.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from noetl_cloud.frames.app import build_app
from noetl_cloud.settings import Settings

INFRA = Path(__file__).resolve().parents[2] / "infra" / "modules"


def _job(name: str) -> str:
    text = (INFRA / "stack" / "main.tf").read_text()
    found = re.search(r'"\$\{var\.name_prefix\}-' + re.escape(name) + r'"\s*=\s*\{(?P<body>.*?)time_zone', text, re.S)
    assert found, f"no scheduler job {name}"
    return found.group("body")


def test_a_scheduler_job_posts_the_frames_reaper_every_minute_with_the_frames_audience() -> None:
    body = _job("frame-reaper")
    assert re.search(r'uri\s*=\s*"\$\{local\.url\["frames"\]\}/api/internal/frames/reap"', body)
    assert re.search(r'audience\s*=\s*local\.url\["frames"\]', body)
    schedule = re.search(r"schedule\s*=\s*var\.maintenance_schedules\.(\w+)", body)
    assert schedule is not None
    variables = (INFRA / "stack" / "variables.tf").read_text()
    assert re.search(schedule.group(1) + r'\s*=\s*optional\(string,\s*"\* \* \* \* \*"\)', variables)
    # The scheduler's identity may invoke the frames service, and its jobs carry an OIDC token for it.
    iam = (INFRA / "iam" / "main.tf").read_text()
    targets = re.search(r"scheduler_targets\s*=\s*setintersection\(var\.roles,\s*\[([^\]]*)\]\)", iam)
    assert targets is not None and '"frames"' in targets.group(1)
    assert "oidc_token" in (INFRA / "scheduler" / "main.tf").read_text()


def test_the_frames_role_serves_the_route_the_job_calls() -> None:
    from noetl_cloud.auth.internal import InternalAuth

    app = build_app(Settings(environment="test"), service=None, auth=InternalAuth(token="t"))  # type: ignore[arg-type]
    rules = {(r.rule, m) for r in app.url_map.iter_rules() for m in r.methods or ()}
    assert ("/api/internal/frames/reap", "POST") in rules
