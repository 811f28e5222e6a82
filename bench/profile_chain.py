"""Where a 3-step chain's CPU goes, in one process: the execute role (Flask's test client) and a worker
service calling it directly, on the local stack's PostgreSQL (a fresh database) and Pub/Sub emulator.

Each chain is one start and one delivery that runs all three steps through eager hand-off, as in the
distributed stack without the HTTP servers. Prints process CPU per chain, statements per chain, and
the top of a ``cProfile`` (thread CPU time) of the measured chains. Not a test and not part of
``make bench``: a tool for the next pass on issue #20 (docs/performance-notes.md).

    make up && .venv/bin/python bench/profile_chain.py --chains 300 --top 40
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from pydantic import SecretStr
from sqlalchemy import event, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from distributed import PLAYBOOK as CHAIN  # the 3-step noop chain the distributed bench runs
from execute import fresh_database  # bench/execute.py: a fresh, migrated database
from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.settings import Settings
from noetl_cloud.tools.registry import default_registry
from noetl_cloud.web.client import ApiResponse
from noetl_cloud.worker.service import WorkerService
from peers_common import drop_database

TOKEN = secrets.token_urlsafe(16)
FIRST_COMMAND = text("SELECT command_id FROM command WHERE execution_id = :e")


class InProcessApi:
    """The worker's port to the control plane, answered by the execute app's test client."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client

    def get(self, path: str) -> ApiResponse:
        answer = self.client.get(path)
        return ApiResponse(answer.status_code, answer.get_json(silent=True), dict(answer.headers))

    def post(self, path: str, json: Any = None) -> ApiResponse:
        answer = self.client.post(path, json=json)
        return ApiResponse(answer.status_code, answer.get_json(silent=True), dict(answer.headers))


@contextmanager
def scratch_database(base_url: str, name: str = "bench_profile_chain") -> Iterator[str]:
    """A fresh, migrated database (bench/execute.py's), dropped afterwards."""
    url = fresh_database(base_url, name)
    try:
        yield url
    finally:
        drop_database(base_url, name)


def run(chains: int, top: int, sort: str, save: str | None) -> None:
    env = os.environ
    with scratch_database(env["NOETL_DATABASE_URL"]) as url:
        settings = Settings(
            environment="local",
            database_url=url,
            project_id=env.get("NOETL_PROJECT_ID", "noetl-local"),
            pubsub_emulator_host=env["PUBSUB_EMULATOR_HOST"],
            pools=("shared",),
            internal_api_token=SecretStr(TOKEN),
            role="execute",
        )
        plane = ControlPlane(settings, env={})
        client = build_app(plane, InternalAuth(token=TOKEN)).test_client()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
        worker = WorkerService(InProcessApi(client), worker_id="profile-w1", tools=default_registry())
        statements = [0]

        def count(*_args: Any, **_kwargs: Any) -> None:
            statements[0] += 1

        event.listen(plane.engine, "before_cursor_execute", count)
        assert client.post("/api/catalog", data=CHAIN, content_type="application/yaml").status_code in (200, 201)

        def one_chain() -> None:
            started = client.post("/api/execute", json={"path": "bench/three"}).get_json()
            execution_id = int(started["execution_id"])
            with plane.engine.connect() as conn:
                command_id = conn.execute(FIRST_COMMAND, {"e": execution_id}).scalar_one()
            notification = {"execution_id": str(execution_id), "command_id": str(command_id), "attempt": 1}
            handled = worker.handle(notification)
            assert handled.status == "ok", handled

        for _ in range(20):  # warm the caches, the pool and the plan cache
            one_chain()
        statements[0] = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(chains):
            one_chain()
        plain = time.process_time() - cpu0
        profile = cProfile.Profile(time.thread_time)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        profile.enable()
        for _ in range(chains):
            one_chain()
        profile.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        plane.relay.close()
        plane.engine.dispose()
    print(f"chains: {chains}; process CPU per chain {plain / chains * 1000:.2f} ms")
    print(f"under cProfile: {cpu / chains * 1000:.2f} ms CPU, {wall / chains * 1000:.2f} ms wall per chain")
    print(f"statements per chain (incl. BEGIN/COMMIT as SQLAlchemy sends them): {statements[0] / chains / 2:.1f}")
    stats = pstats.Stats(profile)
    if save:
        stats.dump_stats(save)
    stats.sort_stats(sort).print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=300)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--sort", default="cumulative", choices=("cumulative", "tottime"))
    parser.add_argument("--save", help="also write the profile to this file (pstats format)")
    args = parser.parse_args()
    run(args.chains, args.top, args.sort, args.save)


if __name__ == "__main__":
    main()
