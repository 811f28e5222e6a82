"""The local stack's scheduler: runs the maintenance schedule (:mod:`.schedule`) as Cloud Scheduler does.

Each job calls its route on its role (``POST <role url><path>``, body ``{}``) with the internal API
bearer token, every ``local_every_s`` seconds (``NOETL_SCHEDULER_EVERY_S`` overrides every job's
period), one thread per job so a long drain never delays the reaper. A job whose role does not
answer is recorded ``unreachable`` and called again at its next tick, as a Cloud Scheduler job
would be.

Started by ``noetl-cloud local up`` as the ``scheduler`` component::

    python -m noetl_cloud.maintenance.scheduler --port 16447 --url execute=http://127.0.0.1:16440 ...

It answers ``GET /healthz`` and ``GET /status`` (each job: target, period, runs, last status; and
``subscriptions``, the execute role's report of the scheduled subscriptions its ``subscription-tick``
job runs: cadence, state, next slot, last run) on its port; ``noetl-cloud local status`` shows it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from noetl_cloud.errors import NoetlError
from noetl_cloud.maintenance.schedule import JOBS, Job
from noetl_cloud.web.client import ApiClient, static_token

log = logging.getLogger(__name__)

Call = Callable[[Job], str]


@dataclass
class JobState:
    """What the scheduler knows of one job (``last``: ``http_<status>``, ``unreachable`` or ``-``)."""

    job: Job
    every_s: float
    target: str
    runs: int = 0
    failures: int = 0
    last: str = "-"
    last_at: float | None = None
    last_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "target": self.target,
            "every_s": self.every_s,
            "schedule": self.job.schedule,
            "runs": self.runs,
            "failures": self.failures,
            "last": self.last,
            "last_at": self.last_at,
            "last_seconds": self.last_seconds,
        }


class Scheduler:
    """Runs ``jobs`` against the role URLs in ``urls``; jobs whose role has no URL are left out."""

    def __init__(
        self,
        urls: Mapping[str, str],
        call: Call,
        *,
        jobs: tuple[Job, ...] = JOBS,
        every_s: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call = call
        self.clock = clock
        self.monotonic = monotonic
        self.stopping = threading.Event()
        self.states = {
            job.name: JobState(job, every_s or job.local_every_s, urls[job.role].rstrip("/") + job.path)
            for job in jobs
            if job.role in urls
        }
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def run_job(self, name: str) -> None:
        """One tick of one job."""
        state = self.states[name]
        started = self.monotonic()
        try:
            result = self.call(state.job)
        except Exception as exc:  # noqa: BLE001 - a tick that fails is recorded, the next one runs
            log.warning("scheduled job failed", extra={"job": name, "error": type(exc).__name__})
            result = "error"
        with self._lock:
            state.runs += 1
            state.failures += 0 if result.startswith("http_2") else 1
            state.last = result
            state.last_at = self.clock()
            state.last_seconds = round(self.monotonic() - started, 3)

    def _loop(self, name: str) -> None:
        every = self.states[name].every_s
        next_at = self.monotonic()
        while not self.stopping.is_set():
            self.run_job(name)
            next_at = max(next_at + every, self.monotonic())
            self.stopping.wait(max(0.0, next_at - self.monotonic()))

    def start(self) -> None:
        for name in self.states:
            thread = threading.Thread(target=self._loop, args=(name,), name=f"job-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout)

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [s.to_dict() for s in self.states.values()]


def http_call(urls: Mapping[str, str], token: str | None, *, timeout_s: float = 60.0) -> Call:
    """POST each job's route with ``{}`` and the bearer token; ``http_<status>`` or ``unreachable``."""
    clients = {
        role: ApiClient(url, token_source=static_token(token) if token else None, timeout_s=timeout_s, retries=0)
        for role, url in urls.items()
    }

    def call(job: Job) -> str:
        try:
            response = clients[job.role].request(job.method, job.path, json={})
        except NoetlError:
            return "unreachable"
        return f"http_{response.status}"

    return call


def subscriptions_report(urls: Mapping[str, str], token: str | None) -> Callable[[], Any]:
    """``GET /api/internal/subscriptions/schedule`` of the execute role (``None`` without one)."""
    if "execute" not in urls:
        return lambda: None
    client = ApiClient(urls["execute"], token_source=static_token(token) if token else None, timeout_s=5.0, retries=0)

    def report() -> Any:
        try:
            response = client.request("GET", "/api/internal/subscriptions/schedule")
        except NoetlError:
            return {"error": "unreachable"}
        return response.json if response.ok else {"error": f"http_{response.status}"}

    return report


def serve(scheduler: Scheduler, port: int, subscriptions: Callable[[], Any] = lambda: None) -> ThreadingHTTPServer:
    """``/healthz`` and ``/status`` on ``127.0.0.1:port`` (in a thread)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                body: Any = {"status": "ok", "jobs": len(scheduler.states)}
            elif self.path == "/status":
                body = {"jobs": scheduler.status(), "subscriptions": subscriptions()}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="scheduler-http", daemon=True).start()
    return server


def parse_urls(pairs: list[str]) -> dict[str, str]:
    urls = {}
    for pair in pairs:
        role, sep, url = pair.partition("=")
        if not sep or not role or not url:
            raise SystemExit(f"--url takes role=url, not {pair!r}")
        urls[role] = url
    return urls


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    import signal

    from noetl_cloud.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m noetl_cloud.maintenance.scheduler")
    parser.add_argument("--port", type=int, required=True, help="where /healthz and /status answer")
    parser.add_argument("--url", action="append", default=[], help="role=url of a role the jobs call")
    args = parser.parse_args(argv)
    settings = Settings.from_env(os.environ if env is None else env, role="scheduler")
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(message)s")
    urls = parse_urls(args.url)
    token = settings.internal_api_token.get_secret_value() if settings.internal_api_token else None
    scheduler = Scheduler(urls, http_call(urls, token), every_s=settings.scheduler_every_s)
    server = serve(scheduler, args.port, subscriptions_report(urls, token))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: scheduler.stopping.set())
    scheduler.start()
    log.info("scheduler running %s", ", ".join(f"{s.job.name}/{s.every_s:g}s" for s in scheduler.states.values()))
    scheduler.stopping.wait()
    scheduler.stop()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
