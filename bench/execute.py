"""Executions per second through the execute role's HTTP API, against a same-run baseline.

Baseline: ``pgbench -n -c 4 -j 2 -T 15`` on the same PostgreSQL, each transaction a one-row INSERT
of a ~300-byte JSONB row. Then the execute role runs under gunicorn on loopback (the command line
of functions/execute/main.py) and is driven with single requests and with batches of 100 and 500.
Each execution writes eight rows (execution, stream head, three events, command, the command
notification's outbox row and one events-mirror row) and publishes two messages to the Pub/Sub emulator.

    make up && .venv/bin/python bench/execute.py [--seconds 15]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pg8000.dbapi
import urllib3

from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.migrate import upgrade
from noetl_cloud.local.postgres import pg_bindir
from noetl_cloud.local.process import gunicorn_argv, http_ok, stop_group, wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.messaging.pubsub import PubSubPublisher
from noetl_cloud.settings import Settings, events_topic_for

ROOT = Path(__file__).resolve().parent.parent
DB = "bench_execute"
TOKEN = secrets.token_hex(16)
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench, path: bench/noop}
workflow:
  - step: start
    tool: {kind: noop}
"""
ROWS_SQL = (
    "SELECT (SELECT count(*) FROM execution) + (SELECT count(*) FROM event) + (SELECT count(*) FROM stream)"
    " + (SELECT count(*) FROM command) + (SELECT count(*) FROM outbox)"
)


def admin(url: str, database: str = "postgres") -> pg8000.dbapi.Connection:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = pg8000.dbapi.connect(user=u.username, password=u.password, host=u.host, port=u.port, database=database)
    conn.autocommit = True
    return conn


def fresh_database(base_url: str, name: str = DB) -> str:
    """Database ``name`` on the server of ``base_url``, dropped and created again, migrated; its URL."""
    conn = admin(base_url)
    conn.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.cursor().execute(f'CREATE DATABASE "{name}"')
    conn.close()
    url = base_url.rsplit("/", 1)[0] + "/" + name
    engine = create_db_engine(Settings(database_url=url), pool_size=1)
    upgrade(engine)
    engine.dispose()
    return url


def pgbench_tps(url: str, seconds: int) -> float:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = admin(url, DB)
    conn.cursor().execute("CREATE TABLE IF NOT EXISTS bench_rows (id bigserial PRIMARY KEY, body jsonb NOT NULL)")
    conn.close()
    body = json.dumps({"execution_id": "1" * 18, "path": "bench/noop", "payload": "x" * 200, "n": 1})
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"INSERT INTO bench_rows (body) VALUES ('{body}');\n")
    out = subprocess.run(
        [
            str(pg_bindir() / "pgbench"),
            "-n",
            "-c",
            "4",
            "-j",
            "2",
            "-T",
            str(seconds),
            "-f",
            script.name,
            "-h",
            str(u.host),
            "-p",
            str(u.port),
            "-U",
            str(u.username),
            DB,
        ],
        env={**os.environ, "PGPASSWORD": str(u.password)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script.name)
    match = re.search(r"tps = ([0-9.]+)", out)
    assert match, out
    return float(match.group(1))


def start_role(env: dict[str, str], url: str, port: int, prefix: str) -> int:
    role_env = {
        **os.environ,
        **env,
        "NOETL_DATABASE_URL": url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(prefix),  # own topic, no subscriber: not pushed to the projector
        "NOETL_LOG_LEVEL": "WARNING",
        "NOETL_DB_POOL_SIZE": "8",
    }
    argv = gunicorn_argv(ROOT / "functions" / "execute", port=port)
    proc = subprocess.Popen(argv, env=role_env, start_new_session=True)
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
        raise SystemExit("the execute role did not start")
    return proc.pid


def drive(call: Callable[[], int], clients: int, total_calls: int) -> tuple[float, int]:
    """Run ``total_calls`` calls from ``clients`` threads; (seconds, executions started)."""
    counter = iter(range(total_calls))
    lock = threading.Lock()
    started = [0]

    def work() -> None:
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            n = call()
            with lock:
                started[0] += n

    threads = [threading.Thread(target=work) for _ in range(clients)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - begin, started[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=15, help="pgbench duration")
    parser.add_argument("--singles", type=int, default=3000)
    parser.add_argument("--batched", type=int, default=30000, help="executions per batch-size run")
    args = parser.parse_args()

    env = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    url = fresh_database(env["NOETL_DATABASE_URL"])
    tps = pgbench_tps(url, args.seconds)

    prefix = f"bench-{secrets.token_hex(3)}-commands-"
    PubSubPublisher("noetl-local", emulator_host=env["PUBSUB_EMULATOR_HOST"]).ensure_topics(
        [prefix + "shared", events_topic_for(prefix)]
    )
    port = 15490
    pid = start_role(env, url, port, prefix)
    http = urllib3.PoolManager(maxsize=16)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{port}"
    try:
        registered = http.request(
            "POST", base + "/api/catalog", body=PLAYBOOK, headers={**auth, "Content-Type": "application/yaml"}
        )
        assert registered.status in (200, 201), registered.data

        def single() -> int:
            r = http.request(
                "POST", base + "/api/execute", json={"path": "bench/noop", "workload": {"n": 1}}, headers=auth
            )
            return 1 if r.status == 202 else 0

        def batch(size: int) -> Callable[[], int]:
            body = {"executions": [{"path": "bench/noop", "workload": {"n": i}} for i in range(size)]}

            def call() -> int:
                r = http.request("POST", base + "/api/execute/batch", json=body, headers=auth)
                return int(r.json()["started"]) if r.status == 200 else 0

            return call

        rows = admin(url, DB)
        figures = {}
        for name, call, clients, calls in [
            ("single", single, 8, args.singles),
            ("batch of 100", batch(100), 4, args.batched // 100),
            ("batch of 500", batch(500), 2, args.batched // 500),
        ]:
            cursor = rows.cursor()
            cursor.execute(ROWS_SQL)
            before = cursor.fetchone()[0]
            seconds, started = drive(call, clients, calls)
            cursor.execute(ROWS_SQL)
            written = cursor.fetchone()[0] - before
            figures[name] = (started / seconds, written / seconds, started)
        rows.close()
    finally:
        stop_group(pid)

    print(f"machine: {os.cpu_count()} cores; execute role: gunicorn 2 workers x 8 threads, loopback")
    print(f"baseline pgbench (-c 4 -j 2 -T {args.seconds}, one-row JSONB INSERT): {tps:,.0f} tps")
    for name, (rate, row_rate, started) in figures.items():
        print(
            f"{name:<13} {rate:>9,.0f} executions/s  {row_rate:>9,.0f} rows/s  ({started} executions)"
            f"  ratio {rate / tps:.3f}"
        )
    best = max(figures["batch of 100"][0], figures["batch of 500"][0])
    print(f"batch ratio: {best / tps:.3f} (goal >= 0.10)")


if __name__ == "__main__":
    main()
