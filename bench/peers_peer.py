"""The peer side of ``bench/peers.py``: procrastinate behind a Flask app under gunicorn (``bench/peers_app.py``).

Each path gets a fresh database of the side's own, with procrastinate's schema applied by its own
API (``app.schema_manager.apply_schema()``). Each measurement starts the Flask app (2 workers x 8
threads, as our roles) and, for the chain, two procrastinate worker processes of concurrency 8 each
(16 jobs at once, as our worker role's 2 x 8 threads), and stops them afterwards:

* (a) ``POST /defer`` (``task.defer``) and (b) ``POST /defer/batch`` (``task.batch_defer``, 100 a request);
* (c) chains ``step1`` → ``step2`` → ``step3``, each task deferring the next from inside the worker;
  per-step latency from a job's ``deferred`` event to its ``succeeded`` event (procrastinate_events);
* (d) ``POST /webhook/bench``: the HMAC check (``hmac.compare_digest``), then ``noop.defer``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from noetl_cloud.local.process import gunicorn_argv, wait_until
from peers_common import (
    Chain,
    Client,
    Meter,
    PgBackends,
    Processes,
    Send,
    Signer,
    Window,
    column,
    connect,
    create_database,
    measure,
    scalar,
)

BENCH = Path(__file__).resolve().parent
DATABASE = "bench_peers_peer"
PORT = 15524
WORKERS, CONCURRENCY = 2, 8
JSON = {"Content-Type": "application/json"}
LAST_DONE = (
    "SELECT count(*) FROM procrastinate_jobs WHERE id > %s AND task_name = 'step3' AND args->>'run' = %s "
    "AND status = 'succeeded'"
)
FAILED = "SELECT count(*) FROM procrastinate_jobs WHERE id > %s AND args->>'run' = %s AND status <> 'succeeded'"
CHAINS = (  # from the first job's deferral to the last one's success
    "SELECT extract(epoch FROM max(e.at) - min(e.at)) FROM procrastinate_jobs j "
    "JOIN procrastinate_events e ON e.job_id = j.id WHERE j.id > %s AND j.args->>'run' = %s GROUP BY j.args->>'i'"
)
STEPS = (
    "SELECT extract(epoch FROM s.at - d.at) FROM procrastinate_jobs j "
    "JOIN procrastinate_events d ON d.job_id = j.id AND d.type = 'deferred' "
    "JOIN procrastinate_events s ON s.job_id = j.id AND s.type = 'succeeded' "
    "WHERE j.id > %s AND j.args->>'run' = %s"
)


class Peer:
    name = "procrastinate"
    tag = "setup"  # names the servers' log files: the path and round measured (``a1``, ``c2``)

    def __init__(self, procs: Processes, stack: dict[str, str], secret: str) -> None:
        self.procs, self.stack, self.secret = procs, stack, secret
        self.pg: PgBackends | None = None
        self.runs = 0

    def fresh(self) -> None:
        """A fresh database with procrastinate's schema (one per path, as ours)."""
        import procrastinate

        self.close()
        self.url = create_database(self.stack["NOETL_DATABASE_URL"], DATABASE)
        schema = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=self.url))
        schema.open()
        try:
            schema.schema_manager.apply_schema()
        finally:
            schema.close()
        self.env = {**os.environ, "PEERS_DATABASE_URL": self.url, "BENCH_SECRET": self.secret}
        self.pg = PgBackends(self.stack["NOETL_DATABASE_URL"], DATABASE)
        self.db = connect(self.url)  # the benchmark's own reads: left out of the PostgreSQL CPU
        self.pg.exclude(self.db)

    def close(self) -> None:
        if self.pg is not None:
            self.db.close()
            self.pg.close()
            self.pg = None

    @contextmanager
    def web(self) -> Iterator[int]:
        argv = gunicorn_argv(BENCH, port=PORT, target="peers_app:web")
        with self.procs.serving(f"{self.tag}-peer-flask", argv, self.env, PORT) as pgid:
            yield pgid

    @contextmanager
    def workers(self) -> Iterator[list[int]]:
        argv = [sys.executable, "-m", "procrastinate", "--app=peers_app.queue", "worker"]
        env = {**self.env, "PYTHONPATH": str(BENCH)}
        pgids = [
            self.procs.start(
                f"{self.tag}-peer-worker-{n}",
                [*argv, "--concurrency", str(CONCURRENCY), "--name", f"peer-worker-{n}"],
                env,
                cwd=BENCH,
            )
            for n in range(WORKERS)
        ]
        try:
            yield pgids
        finally:
            for pgid in pgids:
                self.procs.stop(pgid)

    def _meter(self, groups: list[int]) -> Meter:
        assert self.pg is not None
        return Meter({"servers": groups}, self.pg)

    def _stored(self) -> int:
        return int(scalar(self.db, "SELECT count(*) FROM procrastinate_jobs"))

    def _window(self, send: Send, groups: list[int], seconds: float) -> Window:
        return measure(send, self._meter(groups), seconds, self._stored)

    # -- (a), (b), (d) ---------------------------------------------------------------------------

    def start_one(self, seconds: float) -> Window:
        body = json.dumps({"task": "noop", "args": {"n": 1}}).encode()
        with self.web() as pgid:
            client = Client(PORT)

            def send() -> tuple[str, int]:
                answer = client.post("/defer", body, JSON)
                return str(answer.status), int(answer.status == 202)

            return self._window(send, [pgid], seconds)

    def batch(self, seconds: float, size: int = 100) -> Window:
        body = json.dumps({"task": "noop", "items": [{"n": i} for i in range(size)]}).encode()
        with self.web() as pgid:
            client = Client(PORT)

            def send() -> tuple[str, int]:
                answer = client.post("/defer/batch", body, JSON)
                return str(answer.status), int(answer.json()["started"]) if answer.status == 200 else 0

            return self._window(send, [pgid], seconds)

    def webhook(self, seconds: float, sign: Signer) -> Window:
        with self.web() as pgid:
            client = Client(PORT)

            def send() -> tuple[str, int]:
                body, signature = sign()
                answer = client.post("/webhook/bench", body, {"X-Signature": signature, **JSON})
                return str(answer.status), int(answer.status == 202)

            return self._window(send, [pgid], seconds)

    # -- (c) ---------------------------------------------------------------------------------

    def chain(self, load: int, one_at_a_time: int, warm: int = 10) -> Chain:
        with self.web() as web, self.workers() as workers:
            client = Client(PORT)
            if self._wait(*self._start_many(client, warm), timeout=60) < warm:
                raise SystemExit(f"the peer's warm-up chains did not end; see {self.procs.log_dir}")
            meter = self._meter([web, *workers])
            before = meter.read()
            begin = time.perf_counter()
            loaded = self._start_many(client, load)
            ended = self._wait(*loaded)
            wall = time.perf_counter() - begin
            cpu = meter.since(before)
            alone = self._record("alone")
            for i in range(one_at_a_time):
                body = json.dumps({"task": "step1", "args": {"run": alone[1], "i": i}}).encode()
                answer = client.post("/defer", body, JSON)
                if answer.status != 202:
                    raise SystemExit(f"the peer's Flask app answered {answer.status}: {answer.data[:300]!r}")
                self._wait(alone[0], alone[1], i + 1, interval=0.01)
            failed = scalar(self.db, FAILED, *loaded[:2]) + scalar(self.db, FAILED, *alone)
        return Chain(
            workflows=load,
            ended=ended,
            wall=wall,
            cpu=cpu,
            steps_load=column(self.db, STEPS, *loaded[:2]),
            steps_alone=column(self.db, STEPS, *alone),
            chains_alone=column(self.db, CHAINS, *alone),
            not_completed=int(failed),
        )

    def _record(self, label: str) -> tuple[int, str]:
        """A run label and the highest job id so far (the polls scan the newer jobs only, by primary key)."""
        self.runs += 1
        return int(scalar(self.db, "SELECT coalesce(max(id), 0) FROM procrastinate_jobs")), f"{label}-{self.runs}"

    def _start_many(self, client: Client, n: int) -> tuple[int, str, int]:
        after, run = self._record("load")
        for offset in range(0, n, 100):
            items = [{"run": run, "i": offset + i} for i in range(min(100, n - offset))]
            answer = client.post("/defer/batch", json.dumps({"task": "step1", "items": items}).encode(), JSON)
            if answer.status != 200:
                raise SystemExit(f"the peer's Flask app answered {answer.status}: {answer.data[:300]!r}")
        return after, run, n

    def _wait(self, after: int, run: str, n: int, interval: float = 0.1, timeout: float = 300) -> int:
        """Until ``n`` chains of ``run`` have finished their last step; how many did."""
        wait_until(lambda: int(scalar(self.db, LAST_DONE, after, run)) >= n, timeout=timeout, interval=interval)
        return int(scalar(self.db, LAST_DONE, after, run))
