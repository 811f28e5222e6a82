"""Distributed execution on the local stack: execute → Pub/Sub emulator (push) → worker → POST /api/events.

The golden playbooks reach the in-process runner's final status, ctx and results; an execution on pool
``iot`` runs only on the ``iot`` worker; a worker SIGKILLed mid-task is replaced, the reaper re-issues its
command, and every step's effect lands exactly once; a notification delivered twice runs its step once.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import pubsub_v1
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.process import wait_until
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import free_port, start, stop_all
from tests.integration.control_fixtures import PROJECT, TOKEN, Topics, events_topic_for
from tests.integration.distributed_driver import PLAYBOOKS, golden_content
from tests.unit.engine.conftest import LOOPBACK_ALLOW

PUSH_TOKEN = secrets.token_hex(12)
ENDED = ("completed", "failed", "cancelled")
# A parent's command holds its push delivery while its child playbook runs, and the emulator pushes at
# most two deliveries at a time per subscription (docs/distributed.md): these run one at a time.
BLOCKING = ("nested_loop_parent", "sub_playbook")
GOLDENS = sorted(
    p.name.removesuffix(".yaml") for p in PLAYBOOKS.glob("*.yaml") if not p.name.endswith(".expected.yaml")
)

EFFECTS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: effects, path: e2e/effects}
workload: {dsn: "", gate: ""}
workflow:
  - step: start
    tool:
      - write:
          kind: python
          args: {dsn: "{{ workload.dsn }}", step: start, gate: ""}
          code: &write |
            def main(dsn, step, gate):
                import os, time, pg8000.native, urllib.parse as u
                while gate and not os.path.exists(gate):
                    time.sleep(0.05)
                p = u.urlparse(dsn)
                c = pg8000.native.Connection(p.username, host=p.hostname, port=p.port,
                                             database=p.path.lstrip("/"), password=p.password)
                c.run("INSERT INTO e2e_effect (step) VALUES (:s)", s=step)
                c.close()
                return step
    next: [{step: slow}]
  - step: slow
    tool:
      - write:
          kind: python
          args: {dsn: "{{ workload.dsn }}", step: slow, gate: "{{ workload.gate }}"}
          code: *write
    next: [{step: last}]
  - step: last
    tool:
      - write:
          kind: python
          args: {dsn: "{{ workload.dsn }}", step: last, gate: ""}
          code: *write
"""


def _sql(database_url: str, statement: str, **params: Any) -> list[Any]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        engine.dispose()


class Cluster:
    """execute + one worker per pool, each pool's command topic pushed to its worker by the emulator."""

    def __init__(self, env: dict[str, str], prefix: str) -> None:
        self.env = env
        self.prefix = prefix
        self.api_port = free_port()
        self.api = ApiClient(f"http://127.0.0.1:{self.api_port}", token_source=static_token(TOKEN), timeout_s=30)
        self.workers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        self.subscriber = pubsub_v1.SubscriberClient()
        self.subscriptions: list[str] = []

    def worker_env(self, pool: str, port: int) -> dict[str, str]:
        return {
            **self.env,
            "NOETL_WORKER_POOL": pool,
            "NOETL_WORKER_ID": f"worker-{pool}-{port}",
            "NOETL_WORKER_PUSH_TOKEN": PUSH_TOKEN,
            "NOETL_API_URL": f"http://127.0.0.1:{self.api_port}",
            "NOETL_WORKER_HEARTBEAT_S": "0.5",
        }

    def start_worker(self, pool: str, port: int | None = None) -> int:
        port = port or free_port()
        self.workers[pool] = (start("worker", self.worker_env(pool, port), port, workers=1, threads=8), port)
        return port

    def kill_worker(self, pool: str) -> None:
        proc, _ = self.workers.pop(pool)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def push(self, pool: str, port: int) -> None:
        name = self.subscriber.subscription_path(PROJECT, f"{self.prefix}{pool}-push")
        self.subscriber.create_subscription(
            request={
                "name": name,
                "topic": f"projects/{PROJECT}/topics/{self.prefix}{pool}",
                "push_config": {"push_endpoint": f"http://127.0.0.1:{port}/?token={PUSH_TOKEN}"},
                "ack_deadline_seconds": 30,
            }
        )
        self.subscriptions.append(name)

    def register(self, content: str) -> None:
        self.api.post("/api/catalog", json={"content": content}).raise_for_error()

    def execute(self, path: str, workload: dict[str, Any] | None = None, pool: str | None = None) -> str:
        body: dict[str, Any] = {"path": path, "workload": workload or {}}
        if pool:
            body["execution_pool"] = pool
        return str(self.api.post("/api/execute", json=body).raise_for_error().json["execution_id"])

    def detail(self, execution_id: str) -> dict[str, Any]:
        return self.api.get(f"/api/executions/{execution_id}").raise_for_error().json  # type: ignore[no-any-return]

    def wait(self, execution_id: str, timeout: float = 90) -> dict[str, Any]:
        assert wait_until(lambda: self.detail(execution_id)["status"] in ENDED, timeout=timeout, interval=0.2), (
            self.detail(execution_id)
        )
        return self.detail(execution_id)

    def events(self, execution_id: str) -> list[dict[str, Any]]:
        return self.api.get(f"/api/executions/{execution_id}/events").raise_for_error().json["events"]  # type: ignore[no-any-return]

    def close(self) -> None:
        for name in self.subscriptions:
            self.subscriber.delete_subscription(subscription=name)
        stop_all(proc for proc, _ in self.workers.values())  # every worker at once
        self.subscriber.close()
        self.api.close()


@contextmanager
def cluster(database_url: str, local_env: dict[str, str], prefix: str, **extra: str) -> Iterator[Cluster]:
    env = {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_PROJECT_ID": PROJECT,
        "NOETL_POOLS": "shared,iot",
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(prefix),
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        # The golden playbooks call the test API on loopback, refused by default: allowed explicitly.
        "NOETL_HTTP_TOOL_ALLOW": ",".join(LOOPBACK_ALLOW),
        **extra,
    }
    c = Cluster(env, prefix)
    execute = start("execute", env, c.api_port, workers=2, threads=8)
    try:
        for pool in ("shared", "iot"):
            c.push(pool, c.start_worker(pool))
        yield c
    finally:
        c.close()
        stop_all([execute])


@pytest.fixture
def stack(database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics) -> Iterator[Cluster]:
    with cluster(database_url, local_env, topic_prefix) as c:
        yield c


def _fill(value: Any, url: str) -> Any:
    if isinstance(value, str):
        return value.replace("{api}", url)
    if isinstance(value, dict):
        return {key: _fill(item, url) for key, item in value.items()}
    return value


def test_golden_playbooks_through_pubsub_and_workers_match_the_in_process_runner(stack: Cluster, api: str) -> None:
    stack.register(golden_content("children/double", "children/double"))
    stack.register(golden_content("children/rooms", "children/rooms"))
    started = {}
    for name in [*(n for n in GOLDENS if n not in BLOCKING), *BLOCKING]:
        expected = yaml.safe_load((PLAYBOOKS / f"{name}.expected.yaml").read_text())
        stack.register(golden_content(name, f"golden/{name}"))
        if name == BLOCKING[0]:  # the others first, then each child-starting golden on its own
            for eid, _ in started.values():
                stack.wait(eid)
        started[name] = (stack.execute(f"golden/{name}", _fill(expected.get("workload") or {}, api)), expected)
        if name in BLOCKING:
            stack.wait(started[name][0])
    for name, (eid, expected) in started.items():
        detail = stack.wait(eid)
        assert detail["status"] == expected["status"], (name, detail["error"])
        if name == "parallel_set_ctx_conflict":  # the iteration that loses is the one reported last
            assert detail["results"]["resolve"].startswith("ctx_conflict on winner"), name
            continue
        assert (detail["ctx"], detail["results"]) == (expected["ctx"], expected["results"]), name


def test_an_execution_on_pool_iot_runs_only_on_the_iot_worker(stack: Cluster) -> None:
    stack.register(golden_content("loop_parallel", "golden/loop_parallel"))
    on_iot = stack.execute("golden/loop_parallel", pool="iot")
    on_shared = stack.execute("golden/loop_parallel")
    assert stack.wait(on_iot)["status"] == "completed" and stack.wait(on_shared)["status"] == "completed"
    iot_port, shared_port = stack.workers["iot"][1], stack.workers["shared"][1]

    def workers(eid: str) -> set[str]:
        return {e["payload"]["worker_id"] for e in stack.events(eid) if e["event_type"] == "command.claimed"}

    assert workers(on_iot) == {f"worker-iot-{iot_port}"}
    assert workers(on_shared) == {f"worker-shared-{shared_port}"}


def test_a_worker_killed_mid_task_is_reaped_and_every_effect_lands_once(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics, tmp_path: Path
) -> None:
    _sql(database_url, "CREATE TABLE IF NOT EXISTS e2e_effect (step text NOT NULL)")
    gate = tmp_path / "gate"
    with cluster(database_url, local_env, topic_prefix, NOETL_COMMAND_LEASE_S="2") as stack:
        stack.register(EFFECTS)
        eid = stack.execute("e2e/effects", {"dsn": database_url, "gate": str(gate)})

        def slow_claimed() -> bool:
            rows = _sql(
                database_url,
                "SELECT status FROM command WHERE execution_id = :e AND step = 'slow'",
                e=int(eid),
            )
            return bool(rows) and rows[0][0] == "claimed"

        assert wait_until(slow_claimed, timeout=60, interval=0.1)
        port = stack.workers["shared"][1]
        stack.kill_worker("shared")  # mid-task: `slow` waits on its gate
        stack.start_worker("shared", port)  # a replacement behind the same push endpoint
        assert wait_until(
            lambda: stack.api.post("/api/internal/reaper").raise_for_error().json["reissued"] == 1,
            timeout=30,
            interval=0.5,
        )
        gate.touch()
        detail = stack.wait(eid)
        events = stack.events(eid)
    assert detail["status"] == "completed", detail["error"]
    effects = sorted(r[0] for r in _sql(database_url, "SELECT step FROM e2e_effect"))
    assert effects == ["last", "slow", "start"]
    slow = [e["payload"] for e in events if e["event_type"] == "command.issued" and e["payload"]["step"] == "slow"]
    assert [p["attempt"] for p in slow] == [1, 2] and slow[1]["reason"] == "lease_expired"


def test_a_notification_delivered_twice_runs_its_step_once(stack: Cluster, database_url: str) -> None:
    _sql(database_url, "CREATE TABLE IF NOT EXISTS e2e_effect (step text NOT NULL)")
    stack.register(EFFECTS)
    eid = stack.execute("e2e/effects", {"dsn": database_url, "gate": ""})
    assert stack.wait(eid)["status"] == "completed"
    first = _sql(
        database_url,
        "SELECT command_id, issued_event_id FROM command WHERE execution_id = :e AND step = 'start'",
        e=int(eid),
    )[0]
    publisher = pubsub_v1.PublisherClient()
    data = {"execution_id": eid, "command_id": str(first[0]), "event_id": str(first[1]), "step": "start", "attempt": 1}
    publisher.publish(f"projects/{PROJECT}/topics/{stack.prefix}shared", json.dumps(data).encode()).result()
    marker = stack.execute("e2e/effects", {"dsn": database_url, "gate": ""})  # pushed after the duplicate
    assert stack.wait(marker)["status"] == "completed"
    effects = [r[0] for r in _sql(database_url, "SELECT step FROM e2e_effect")]
    assert effects.count("start") == 2  # one per execution: the redelivered notification ran nothing
    claims = [e for e in stack.events(eid) if e["event_type"] == "command.claimed"]
    assert len(claims) == 3


def _cli(stack: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETL_API_URL": f"http://127.0.0.1:{stack.api_port}", "NOETL_INTERNAL_API_TOKEN": TOKEN}
    return subprocess.run(
        [str(Path(sys.executable).with_name("noetl-cloud")), "execute", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_noetl_cloud_execute_registers_a_file_starts_it_and_waits_for_its_end(stack: Cluster, tmp_path: Path) -> None:
    document = yaml.safe_load(golden_content("loop_sequential", "cli/loop_sequential"))
    file = tmp_path / "loop.yaml"
    file.write_text(yaml.safe_dump(document))
    expected = yaml.safe_load((PLAYBOOKS / "loop_sequential.expected.yaml").read_text())
    done = _cli(stack, str(file), "--wait")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["results"] == expected["results"]
    assert "step.done" in done.stderr or "loop.done" in done.stderr  # each step is printed as it ends

    failing = _cli(stack, "cli/loop_sequential", "--set", "letters=not-a-list", "--wait", "--quiet")
    assert failing.returncode == 1 and json.loads(failing.stdout)["status"] == "failed"
    unknown = _cli(stack, "cli/nothing-here", "--wait")
    assert unknown.returncode == 2 and "playbook_not_found" in unknown.stderr
