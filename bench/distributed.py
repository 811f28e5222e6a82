"""Distributed execution end to end: execute → Pub/Sub emulator push → worker → POST /api/events.

Baseline, same run: the emulator's push round trip for an empty handler — one message published, the
time until a loopback HTTP handler (answering 204 at once) receives it, one message at a time.

Then the execute and worker roles run under gunicorn (their deployables' command lines) on a fresh
database, with the emulator pushing the command topic to the worker, and ``--executions`` runs of a
3-step linear playbook (noop tools) are started together. Per-step latency is the time from a step's
``step.started`` (the control plane issues its command) to its ``step.done`` (the worker's report was
folded), from the events' own times.

    make up && .venv/bin/python bench/distributed.py [--executions 200]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import urllib3
from sqlalchemy import create_engine, text

from execute import fresh_database  # bench/execute.py: a fresh, migrated database
from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.process import gunicorn_argv, http_ok, stop_group, wait_until
from noetl_cloud.local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "noetl-local"
TOKEN = secrets.token_hex(16)
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: three, path: bench/three}
workflow:
  - step: start
    tool: {kind: noop, result: 1}
    next: [{step: middle}]
  - step: middle
    tool: {kind: noop, result: 2}
    next: [{step: last}]
  - step: last
    tool: {kind: noop, result: 3}
"""


def pubsub(env: dict[str, str]) -> tuple[object, object]:
    os.environ["PUBSUB_EMULATOR_HOST"] = env["PUBSUB_EMULATOR_HOST"]
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def push_subscription(subscriber: object, topic: str, name: str, endpoint: str) -> str:
    path = f"projects/{PROJECT}/subscriptions/{name}"
    subscriber.create_subscription(  # type: ignore[attr-defined]
        request={
            "name": path,
            "topic": f"projects/{PROJECT}/topics/{topic}",
            "push_config": {"push_endpoint": endpoint},
            "ack_deadline_seconds": 60,
        }
    )
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def baseline(publisher: object, subscriber: object, messages: int) -> list[float]:
    """Seconds from publish to the empty handler's receipt, one message at a time."""
    arrived = threading.Event()

    class Empty(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.end_headers()
            arrived.set()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Empty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    topic = f"bench-push-{secrets.token_hex(3)}"
    publisher.create_topic(name=f"projects/{PROJECT}/topics/{topic}")  # type: ignore[attr-defined]
    sub = push_subscription(subscriber, topic, topic, f"http://127.0.0.1:{server.server_port}/")
    latencies = []
    try:
        for _ in range(messages):
            arrived.clear()
            begin = time.perf_counter()
            publisher.publish(f"projects/{PROJECT}/topics/{topic}", b"{}").result()  # type: ignore[attr-defined]
            if not arrived.wait(30):
                raise SystemExit("the emulator did not push within 30 s")
            latencies.append(time.perf_counter() - begin)
    finally:
        subscriber.delete_subscription(subscription=sub)  # type: ignore[attr-defined]
        server.shutdown()
    return latencies


def start_role(name: str, env: dict[str, str], port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        gunicorn_argv(ROOT / "functions" / name, port=port, workers=workers, threads=threads),
        env={**os.environ, **env, "NOETL_ROLE": name},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
        stop_group(proc.pid)
        raise SystemExit(f"{name} did not start")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--baseline-messages", type=int, default=200)
    args = parser.parse_args()

    env = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    publisher, subscriber = pubsub(env)
    push = baseline(publisher, subscriber, args.baseline_messages)

    url = fresh_database(env["NOETL_DATABASE_URL"])
    prefix = f"bench-{secrets.token_hex(3)}-commands-"
    publisher.create_topic(name=f"projects/{PROJECT}/topics/{prefix}shared")  # type: ignore[attr-defined]
    events = prefix.removesuffix("-commands-") + "-events"
    publisher.create_topic(name=f"projects/{PROJECT}/topics/{events}")  # type: ignore[attr-defined]
    api_port, worker_port = 15491, 15492
    common = {
        **env,
        "NOETL_DATABASE_URL": url,
        "NOETL_PROJECT_ID": PROJECT,
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": prefix.removesuffix("-commands-") + "-events",  # own topic, no subscriber
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_LOG_LEVEL": "WARNING",
    }
    execute = start_role("execute", common, api_port, workers=2, threads=8)
    worker_env = {
        **common,
        "NOETL_API_URL": f"http://127.0.0.1:{api_port}",
        "NOETL_WORKER_PUSH_TOKEN": TOKEN,
        "NOETL_WORKER_ID": "bench-worker",
    }
    worker = start_role("worker", worker_env, worker_port, workers=2, threads=8)
    sub = push_subscription(
        subscriber, f"{prefix}shared", f"{prefix}shared-worker", f"http://127.0.0.1:{worker_port}/?token={TOKEN}"
    )
    http = urllib3.PoolManager(maxsize=16)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{api_port}"
    engine = create_engine(normalize_url(url))
    try:
        registered = http.request(
            "POST", base + "/api/catalog", body=PLAYBOOK, headers={**auth, "Content-Type": "application/yaml"}
        )
        assert registered.status in (200, 201), registered.data
        begin = time.perf_counter()
        for offset in range(0, args.executions, 100):
            n = min(100, args.executions - offset)
            batch = {"executions": [{"path": "bench/three", "workload": {"i": offset + i}} for i in range(n)]}
            answer = http.request("POST", base + "/api/execute/batch", json=batch, headers=auth)
            assert answer.status == 200, answer.data

        def ended() -> bool:
            with engine.connect() as conn:
                done = conn.execute(text("SELECT count(*) FROM execution WHERE status IN ('completed', 'failed')"))
                return int(done.scalar_one()) >= args.executions

        if not wait_until(ended, timeout=600, interval=0.2):
            raise SystemExit("the executions did not end within 600 s")
        wall = time.perf_counter() - begin
        with engine.connect() as conn:
            failed = conn.execute(text("SELECT count(*) FROM execution WHERE status <> 'completed'")).scalar_one()
            rows = conn.execute(
                text(
                    "SELECT extract(epoch FROM d.event_time - s.event_time) FROM event s JOIN event d "
                    "ON d.execution_id = s.execution_id AND d.event_type = 'step.done' "
                    "AND d.payload->>'step_run_id' = s.payload->>'step_run_id' WHERE s.event_type = 'step.started'"
                )
            ).scalars()
            steps = [float(r) for r in rows]
    finally:
        subscriber.delete_subscription(subscription=sub)  # type: ignore[attr-defined]
        engine.dispose()
        for proc in (worker, execute):
            stop_group(proc.pid)
            proc.wait()

    p50, p95 = percentile(steps, 0.5), percentile(steps, 0.95)
    b50, b95 = percentile(push, 0.5), percentile(push, 0.95)
    print(f"baseline: emulator push round trip, empty handler ({len(push)} messages, one at a time)")
    print(f"  p50 {b50 * 1000:7.1f} ms   p95 {b95 * 1000:7.1f} ms   mean {statistics.mean(push) * 1000:7.1f} ms")
    print(f"distributed: {args.executions} executions x 3 steps, execute + worker under gunicorn, emulator push")
    print(f"  wall {wall:6.2f} s   steps/s {len(steps) / wall:7.1f}   executions/s {args.executions / wall:6.1f}")
    counts = f"({len(steps)} steps, {failed} executions not completed)"
    print(f"  per-step latency p50 {p50 * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   {counts}")
    print(f"per-step p50 / push p50: {p50 / b50:.2f}   per-step p95 / push p95: {p95 / b95:.2f}")


if __name__ == "__main__":
    main()
