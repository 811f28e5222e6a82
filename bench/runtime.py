"""Messages per second the subscription runtime dispatches, next to two baselines of the same run.

1. **pull baseline** -- the official client's streaming pull from the Pub/Sub emulator with an empty
   callback that only acks (the emulator paces one stream at about 2k msgs/s);
2. **execute baseline** -- the execute role's ``POST /api/execute/batch`` (batches of 100, 4 client
   threads), executions per second;
3. **runtime** -- ``functions/subscription_runtime/main.py`` draining a backlog of the same size
   into the same execute role (``batch_dispatch``, ``batch_max: 100``), executions per second, and
   the runtime's peak RSS.

The runtime is a pipe between the two: ``runtime ratio = runtime / min(baselines)`` (goal >= 0.70).

    make up && .venv/bin/python bench/runtime.py [--messages 20000]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pg8000.dbapi
import urllib3
from google.cloud import pubsub_v1

from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.migrate import upgrade
from noetl_cloud.local.components import PROJECT_ID
from noetl_cloud.local.process import gunicorn_argv, http_ok, stop_group, wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.settings import Settings, events_topic_for

ROOT = Path(__file__).resolve().parent.parent
DB = "bench_runtime"
TOKEN = secrets.token_hex(16)
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noop, path: bench/noop}
workflow:
  - step: start
    tool: {kind: noop}
"""


def database(url: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = pg8000.dbapi.connect(user=u.username, password=u.password, host=u.host, port=u.port, database="postgres")
    conn.autocommit = True
    conn.cursor().execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    conn.cursor().execute(f'CREATE DATABASE "{DB}"')
    conn.close()
    target = url.rsplit("/", 1)[0] + f"/{DB}"
    engine = create_db_engine(Settings(database_url=target), pool_size=1)
    upgrade(engine)
    engine.dispose()
    return target


def count(url: str, *, distinct: bool = True) -> int:
    """Executions the runtime started: distinct messages (a redelivered message counts once), or
    every execution."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = pg8000.dbapi.connect(user=u.username, password=u.password, host=u.host, port=u.port, database=DB)
    what = "count(DISTINCT meta->>'message_id')" if distinct else "count(*)"
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT {what} FROM execution WHERE meta ? 'subscription_path'")
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def backlog(n: int) -> tuple[str, str]:
    """A topic with a pull subscription holding ``n`` messages."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    suffix = secrets.token_hex(4)
    topic = publisher.topic_path(PROJECT_ID, f"bench-rt-{suffix}")
    sub = subscriber.subscription_path(PROJECT_ID, f"bench-rt-{suffix}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=60)
    futures = [publisher.publish(topic, json.dumps({"n": i}).encode()) for i in range(n)]
    for future in futures:
        future.result(timeout=120)
    subscriber.close()
    return topic, sub


def pull_baseline(n: int) -> float:
    _, sub = backlog(n)
    subscriber = pubsub_v1.SubscriberClient()
    done = threading.Event()
    got = [0]
    lock = threading.Lock()

    def callback(message: Any) -> None:
        message.ack()
        with lock:
            got[0] += 1
            if got[0] >= n:
                done.set()

    started = time.monotonic()
    future = subscriber.subscribe(sub, callback, flow_control=pubsub_v1.types.FlowControl(max_messages=1000))
    done.wait(600)
    elapsed = time.monotonic() - started
    future.cancel()
    try:
        future.result(timeout=10)
    except Exception:  # noqa: BLE001, S110 - the stream's end after a cancel is not measured
        pass
    subscriber.close()
    return got[0] / elapsed


def execute_baseline(api: str, n: int) -> float:
    http = urllib3.PoolManager(maxsize=8)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    batches = n // 100
    lock = threading.Lock()
    left = [batches]

    def client() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            body = {"executions": [{"path": "bench/noop", "workload": {"i": i}} for i in range(100)]}
            response = http.request("POST", f"{api}/api/execute/batch", body=json.dumps(body), headers=headers)
            assert response.status == 200, response.data[:200]

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return batches * 100 / (time.monotonic() - started)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def runtime_run(env: dict[str, str], api: str, db_url: str, n: int) -> tuple[float, float, float, int]:
    """``(messages/s, peak RSS MiB, seconds, extra executions)`` of the runtime draining a backlog
    of ``n`` (a message counts once; ``extra``: executions of redelivered messages)."""
    _, sub = backlog(n)
    name = f"bench-{secrets.token_hex(3)}"
    doc = {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": name, "path": f"subscriptions/{name}"},
        "spec": {
            "source": "pubsub",
            "mode": "pull",
            "subscription": sub,
            "runtime": {"max_in_flight": 1000},
            "dispatch": {"playbook": "bench/noop", "batch_dispatch": True, "batch_max": 100},
        },
    }
    http = urllib3.PoolManager()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    import yaml

    body = json.dumps({"content": yaml.safe_dump(doc)})
    assert http.request("POST", f"{api}/api/catalog", body=body, headers=headers).status in (200, 201)
    port = free_port()
    before = count(db_url)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "functions" / "subscription_runtime" / "main.py")],
        env={
            **os.environ,
            **env,
            "PORT": str(port),
            "NOETL_API_URL": api,
            "NOETL_SUBSCRIPTION_PATH": f"subscriptions/{name}",
            "NOETL_RUNTIME_CONCURRENCY": os.environ.get("NOETL_RUNTIME_CONCURRENCY", "4"),
            "NOETL_RUNTIME_LINGER_MS": os.environ.get("NOETL_RUNTIME_LINGER_MS", "20"),
            "NOETL_LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), timeout=60)
        started = time.monotonic()
        peak = [0.0]

        def progress() -> bool:
            peak[0] = max(peak[0], peak_rss_mib(proc.pid))
            return count(db_url) - before >= n

        wait_until(progress, timeout=900, interval=0.5)
        elapsed = time.monotonic() - started
        done = count(db_url) - before
        extra = count(db_url, distinct=False) - done - before
        return done / elapsed, max(peak[0], peak_rss_mib(proc.pid)), elapsed, extra
    finally:
        stop_group(proc.pid)
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    n = args.messages
    stack_env = LocalStack.from_env(os.environ).env()
    os.environ["PUBSUB_EMULATOR_HOST"] = stack_env["PUBSUB_EMULATOR_HOST"]
    db_url = database(stack_env["NOETL_DATABASE_URL"])
    prefix = f"bench-rt-{secrets.token_hex(3)}-commands-"
    env = {
        **stack_env,
        "NOETL_DATABASE_URL": db_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(prefix),  # own topic, no subscriber: not pushed to the projector
        "NOETL_LOG_LEVEL": "WARNING",
    }
    from noetl_cloud.messaging.pubsub import PubSubPublisher

    PubSubPublisher(PROJECT_ID, emulator_host=stack_env["PUBSUB_EMULATOR_HOST"]).ensure_topics(
        [f"{prefix}shared", events_topic_for(prefix)]
    )
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    execute = subprocess.Popen(
        gunicorn_argv(ROOT / "functions" / "execute", port=port, workers=2, threads=8),
        env={**os.environ, **env, "NOETL_ROLE": "execute"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: http_ok(f"{api}/healthz"), timeout=60)
        http = urllib3.PoolManager()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        http.request("POST", f"{api}/api/catalog", body=json.dumps({"content": PLAYBOOK}), headers=headers)
        pull = pull_baseline(n)
        print(f"pull baseline:    {pull:9,.0f} msgs/s   (streaming pull, empty callback, {n:,} messages)")
        execute_rate = execute_baseline(api, n)
        print(f"execute baseline: {execute_rate:9,.0f} executions/s (batches of 100, 4 clients)")
        rate, rss, seconds, extra = runtime_run(env, api, db_url, n)
        print(f"runtime:          {rate:9,.0f} msgs/s   ({n:,} messages -> executions in {seconds:.1f} s)")
        print(f"runtime redeliveries: {extra:,} executions of a message already run (dedup off)")
        print(f"runtime peak RSS: {rss:9,.1f} MiB")
        print(f"runtime ratio: {rate / min(pull, execute_rate):.2f}")
    finally:
        stop_group(execute.pid)
        execute.wait()


if __name__ == "__main__":
    main()
