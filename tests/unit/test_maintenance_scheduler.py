"""The local scheduler runs each job of the schedule against its role's URL, records what each call
answered, and keeps calling a job whose role does not answer (as Cloud Scheduler does)."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from noetl_cloud.local.process import wait_until
from noetl_cloud.maintenance.schedule import JOBS, Job
from noetl_cloud.maintenance.scheduler import Scheduler, http_call, parse_urls, serve

URLS = {"execute": "http://e", "frames": "http://f", "projector": "http://p", "spool_drainer": "http://d"}


def test_every_job_targets_its_roles_url_and_a_role_without_url_has_no_job() -> None:
    scheduler = Scheduler(URLS, lambda job: "http_200")
    assert {n: s.target for n, s in scheduler.states.items()} == {j.name: URLS[j.role] + j.path for j in JOBS}
    partial = Scheduler({"execute": "http://e/"}, lambda job: "http_200")
    assert set(partial.states) == {j.name for j in JOBS if j.role == "execute"}
    assert {"outbox-sweep", "command-reaper", "retention"} <= set(partial.states)
    assert partial.states["outbox-sweep"].target == "http://e/api/internal/outbox/sweep"


def test_a_tick_records_the_answer_and_failures_count() -> None:
    answers = iter(["http_200", "unreachable", "http_503"])
    scheduler = Scheduler(URLS, lambda job: next(answers), jobs=(JOBS[0],))
    for _ in range(3):
        scheduler.run_job(JOBS[0].name)
    (state,) = scheduler.status()
    assert state["runs"] == 3 and state["failures"] == 2 and state["last"] == "http_503"


def test_a_job_that_raises_is_recorded_and_runs_again() -> None:
    def boom(job: Job) -> str:
        raise RuntimeError("x")

    scheduler = Scheduler(URLS, boom, jobs=(JOBS[0],))
    scheduler.run_job(JOBS[0].name)
    scheduler.run_job(JOBS[0].name)
    assert scheduler.status()[0]["last"] == "error" and scheduler.status()[0]["runs"] == 2


def test_the_override_period_applies_to_every_job() -> None:
    scheduler = Scheduler(URLS, lambda job: "http_200", every_s=1.0)
    assert {s.every_s for s in scheduler.states.values()} == {1.0}


def test_urls_are_role_equals_url() -> None:
    assert parse_urls(["execute=http://127.0.0.1:1"]) == {"execute": "http://127.0.0.1:1"}


class _Recorder:
    """A role that records the scheduler's calls (method, path, auth header, body)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                recorder.calls.append(("POST", self.path, self.headers.get("Authorization"), body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_the_scheduler_calls_the_routes_with_the_bearer_token_at_its_cadence_and_reports_them() -> None:
    role = _Recorder()
    urls = {"execute": role.url, "spool_drainer": "http://127.0.0.1:9"}  # nothing listens on the drainer's
    scheduler = Scheduler(urls, http_call(urls, "tok", timeout_s=2), every_s=0.2)
    server = serve(scheduler, 0)
    try:
        scheduler.start()
        assert wait_until(lambda: len([c for c in role.calls if c[1] == "/api/internal/reaper"]) >= 3, timeout=10)
        assert wait_until(lambda: scheduler.states["spool-drainer"].runs >= 2, timeout=10)
    finally:
        scheduler.stop()
    assert {c[1] for c in role.calls} == {j.path for j in JOBS if j.role == "execute"}
    assert all(c[0] == "POST" and c[2] == "Bearer tok" and c[3] == {} for c in role.calls)
    port = server.server_address[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
        jobs = {j["job"]: j for j in json.loads(response.read())["jobs"]}
    server.shutdown()
    assert jobs["command-reaper"]["last"] == "http_200" and jobs["command-reaper"]["failures"] == 0
    assert jobs["spool-drainer"]["last"] == "unreachable" and jobs["spool-drainer"]["every_s"] == 0.2


def test_status_carries_the_execute_roles_report_of_scheduled_subscriptions() -> None:
    from noetl_cloud.cli.local import subscription_lines
    from noetl_cloud.local.status import ComponentStatus

    report = {
        "jobs": [
            {
                "path": "subs/orders",
                "cadence": "*/5 * * * *",
                "state": "active",
                "runs": 3,
                "next_due": "2026-11-27T10:10:00+00:00",
                "last_run": {"due_at": "2026-11-27T10:05:00+00:00", "status": "ok", "polled": 4, "started": 4},
            }
        ],
        "skipped": [{"path": "subs/old", "reason": "subscription is draining"}],
    }
    server = serve(Scheduler({}, lambda job: "http_200"), 0, lambda: report)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/status", timeout=5) as response:
            body = json.loads(response.read())
    finally:
        server.shutdown()
    assert body["subscriptions"] == report
    row = ComponentStatus("scheduler", 1, 2, True, True, 0.1, "scheduler", True, [], body["subscriptions"])
    lines = subscription_lines([row])
    assert lines[1] == "scheduled subscriptions"
    assert lines[3].split()[:4] == ["subs/orders", "*/5", "*", "*"]
    assert "active" in lines[3] and "2026-11-27T10:10:00+00:00 / 2026-11-27T10:05:00+00:00 ok polled 4" in lines[3]
    assert lines[4] == "subs/old: not scheduled (subscription is draining)"
    unreachable = ComponentStatus("scheduler", 1, 2, True, True, 0.1, "scheduler", True, [], {"error": "unreachable"})
    assert "did not answer (unreachable)" in subscription_lines([unreachable])[1]


def test_the_report_of_a_scheduler_without_execute_role_is_none() -> None:
    from noetl_cloud.maintenance.scheduler import subscriptions_report

    assert subscriptions_report({"frames": "http://127.0.0.1:9"}, None)() is None
    assert subscriptions_report({"execute": "http://127.0.0.1:9"}, "tok")() == {"error": "unreachable"}
