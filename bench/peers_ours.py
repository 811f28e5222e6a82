"""Our side of ``bench/peers.py``: the roles under gunicorn, wired as in ``bench/distributed.py`` and ``ingress.py``.

Each measurement starts the roles it needs on the side's own database (fresh and migrated for each
path), with command and events topics of its own on a Pub/Sub emulator this run starts for itself
(the events topic has no subscriber, so nothing is pushed to a projector), and stops them afterwards:

* (a) ``POST /api/execute`` and (b) ``POST /api/execute/batch`` (100 a request) to the execute role;
* (c) execute + worker, the emulator pushing the command topic to the worker (a push subscription
  to ``/?token=...``), the 3-step noop playbook; per-step latency from the events ``step.started``
  (the control plane issues the command) to ``step.done`` (the worker's report is folded);
* (d) the ingress role (a listener verifying ``hmac_sha256`` of ``X-Signature``) forwarding to execute.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from google.api_core.exceptions import GoogleAPICallError

from distributed import PLAYBOOK as CHAIN  # the 3-step noop chain of bench/distributed.py
from ingress import PLAYBOOK as NOOP  # bench/ingress.py's noop playbook and its HMAC listener
from ingress import SUBSCRIPTION as LISTENER
from noetl_cloud.local import emulators
from noetl_cloud.local.process import gunicorn_argv, port_open, stop_group, wait_until
from peers_common import (
    HOST,
    TICK,
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
    group_ticks,
    measure,
    scalar,
)

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "noetl-local"
DATABASE = "bench_peers_ours"
PORTS = {"execute": 15521, "worker": 15522, "ingress": 15523}
EMULATOR_PORT = 15525
EMULATOR_WARMUP_REQUESTS = 8000
CHAINS = "SELECT extract(epoch FROM ended_at - created_at) FROM execution WHERE execution_id = ANY(%s)"
ENDED = "SELECT count(*) FROM execution WHERE execution_id = ANY(%s) AND status IN ('completed', 'failed', 'cancelled')"
STEPS = (
    "SELECT extract(epoch FROM d.event_time - s.event_time) FROM event s JOIN event d "
    "ON d.execution_id = s.execution_id AND d.event_type = 'step.done' "
    "AND d.payload->>'step_run_id' = s.payload->>'step_run_id' "
    "WHERE s.event_type = 'step.started' AND s.execution_id = ANY(%s)"
)


class Ours:
    name = "ours"
    tag = "setup"  # names the servers' log files: the path and round measured (``a1``, ``c2``)

    def __init__(self, procs: Processes, stack: dict[str, str], secret: str) -> None:
        self.procs, self.stack, self.secret = procs, stack, secret
        self.token = secrets.token_hex(16)
        self.auth = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        self.emulator_host = f"{HOST}:{EMULATOR_PORT}"
        self.emulator = procs.adopt("ours-pubsub-emulator", private_emulator(procs.log_dir, EMULATOR_PORT))
        os.environ["PUBSUB_EMULATOR_HOST"] = self.emulator_host
        from google.cloud import pubsub_v1

        self.publisher, self.subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        self.warm_emulator()
        self.pg: PgBackends | None = None
        self.topics: list[str] = []

    def warm_emulator(self, requests: int = EMULATOR_WARMUP_REQUESTS) -> None:
        """Publish ``requests`` one-message requests before anything is measured. A fresh emulator is a
        JVM compiling its code as it goes: measured, its first 1,000 ``Publish`` requests cost 2.3 ms of
        CPU each and requests 5,000-6,000 cost 0.46 ms. Without this, the first path measured would be
        charged for the compiling, which a long-running broker (or Google's service) never costs."""
        from google.pubsub_v1 import PublisherClient as PublishApi
        from google.pubsub_v1 import PubsubMessage

        topic = f"projects/{PROJECT}/topics/peers-warmup-{secrets.token_hex(3)}"
        self.publisher.create_topic(name=topic)
        api, message = PublishApi(), [PubsubMessage(data=b"{}", attributes={"warmup": "1"})]
        try:
            for done in range(requests):
                if done == requests - 1000:
                    before = group_ticks(self.emulator)
                api.publish(topic=topic, messages=message, timeout=30)
            per_request = (group_ticks(self.emulator) - before) / TICK  # seconds per 1,000 = ms per request
            print(
                f"Pub/Sub emulator warmed by {requests:,} Publish requests; "
                f"the last 1,000 cost {per_request:.2f} ms of CPU each"
            )
        finally:
            with suppress(GoogleAPICallError):
                self.publisher.delete_topic(topic=topic, timeout=10)

    def fresh(self) -> None:
        """A fresh, migrated database (one per path: what a path leaves behind never weighs on the next)."""
        from noetl_cloud.db.engine import create_db_engine
        from noetl_cloud.db.migrate import upgrade
        from noetl_cloud.settings import Settings

        self.close()
        self.url = create_database(self.stack["NOETL_DATABASE_URL"], DATABASE)
        engine = create_db_engine(Settings(database_url=self.url), pool_size=1)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        self.pg = PgBackends(self.stack["NOETL_DATABASE_URL"], DATABASE)
        self.db = connect(self.url)  # the benchmark's own reads: left out of the PostgreSQL CPU
        self.pg.exclude(self.db)
        # Topics live as long as the database: the relay's sweep may publish a row of an earlier
        # round later (the catalog's events are left to it), and its topic must still be there.
        run = f"peers-{secrets.token_hex(3)}"
        self.prefix, self.events_topic = f"{run}-commands-", f"{run}-events"  # events outside the command prefix
        self.topics = [f"projects/{PROJECT}/topics/{t}" for t in (self.prefix + "shared", self.events_topic)]
        for topic in self.topics:
            self.publisher.create_topic(name=topic)

    def close(self) -> None:
        if self.pg is not None:
            self.db.close()
            self.pg.close()
            self.pg = None
            for topic in self.topics:
                with suppress(GoogleAPICallError):
                    self.publisher.delete_topic(topic=topic, timeout=10)

    # -- roles ---------------------------------------------------------------------------------

    def _env(self, role: str) -> dict[str, str]:
        return {
            **os.environ,
            **self.stack,
            "NOETL_ROLE": role,
            "PUBSUB_EMULATOR_HOST": self.emulator_host,
            "NOETL_DATABASE_URL": self.url,
            "NOETL_PROJECT_ID": PROJECT,
            "NOETL_POOLS": "shared",
            "NOETL_COMMAND_TOPIC_PREFIX": self.prefix,
            "NOETL_EVENTS_TOPIC": self.events_topic,  # its own topic, no subscriber: nothing reaches the projector
            "NOETL_INTERNAL_API_TOKEN": self.token,
            "NOETL_API_URL": f"http://{HOST}:{PORTS['execute']}",
            "NOETL_WORKER_PUSH_TOKEN": self.token,
            "NOETL_WORKER_ID": "bench-peers-worker",
            "NOETL_SECRET_BENCH": self.secret,
            "NOETL_LOG_LEVEL": "WARNING",
            "NOETL_DB_POOL_SIZE": "8",
            # The product's defaults whatever the stack runs with (it records spans and metrics
            # locally): the peer has no telemetry, and bench/telemetry.py prices ours on its own.
            "NOETL_TRACING": "off",
            "NOETL_METRICS": "off",
        }

    @contextmanager
    def roles(self, *names: str) -> Iterator[dict[str, int]]:
        """execute and ``names`` under gunicorn (2 workers x 8 threads each); the worker gets the
        command topic pushed to it by a subscription that lives as long as the roles."""
        groups: dict[str, int] = {}
        push = None
        try:
            with ExitStack() as running:
                for role in ("execute", *names):
                    argv = gunicorn_argv(ROOT / "functions" / role, port=PORTS[role])
                    server = self.procs.serving(f"{self.tag}-ours-{role}", argv, self._env(role), PORTS[role])
                    groups[role] = running.enter_context(server)
                if "worker" in names:
                    push = f"projects/{PROJECT}/subscriptions/{self.prefix}shared-worker-{self.tag}"
                    endpoint = f"http://{HOST}:{PORTS['worker']}/?token={self.token}"
                    self.subscriber.create_subscription(
                        request={
                            "name": push,
                            "topic": self.topics[0],
                            "push_config": {"push_endpoint": endpoint},
                            "ack_deadline_seconds": 60,
                        }
                    )
                self._register()
                yield groups
        finally:
            if push:
                self.subscriber.delete_subscription(subscription=push)

    def _register(self) -> None:
        api = Client(PORTS["execute"], size=1)
        for doc in (NOOP, CHAIN, LISTENER):
            answer = api.post("/api/catalog", doc.encode(), {**self.auth, "Content-Type": "application/yaml"})
            if answer.status not in (200, 201):
                raise SystemExit(f"our catalog refused a document: {answer.status} {answer.data[:300]!r}")
        api.close()

    def _meter(self, groups: dict[str, int]) -> Meter:
        assert self.pg is not None
        servers = {f"servers:{role}": [pgid] for role, pgid in groups.items()}  # a CPU row per role
        return Meter({**servers, "emulator": [self.emulator]}, self.pg)

    def _stored(self) -> int:
        return int(scalar(self.db, "SELECT count(*) FROM execution"))

    # -- (a), (b), (d) ---------------------------------------------------------------------------

    def start_one(self, seconds: float) -> Window:
        body = json.dumps({"path": "bench/noop", "workload": {"n": 1}}).encode()
        with self.roles() as groups:
            client = Client(PORTS["execute"])

            def send() -> tuple[str, int]:
                answer = client.post("/api/execute", body, self.auth)
                return str(answer.status), int(answer.status == 202)

            return self._window(send, groups, seconds)

    def batch(self, seconds: float, size: int = 100) -> Window:
        executions = [{"path": "bench/noop", "workload": {"n": i}} for i in range(size)]
        body = json.dumps({"executions": executions}).encode()
        with self.roles() as groups:
            client = Client(PORTS["execute"])

            def send() -> tuple[str, int]:
                answer = client.post("/api/execute/batch", body, self.auth)
                return str(answer.status), int(answer.json()["started"]) if answer.status == 200 else 0

            return self._window(send, groups, seconds)

    def webhook(self, seconds: float, sign: Signer) -> Window:
        with self.roles("ingress") as groups:
            api = Client(PORTS["execute"], size=1)
            view = api.post("/api/subscriptions/register", b'{"path": "subscriptions/bench"}', self.auth).json()
            if view.get("state") != "active":
                api.post(f"/api/subscriptions/{view['subscription_id']}/activate", b"", self.auth)
            api.close()
            client = Client(PORTS["ingress"])

            def send() -> tuple[str, int]:
                body, signature = sign()
                answer = client.post(
                    "/ingress/bench", body, {"X-Signature": signature, "Content-Type": "application/json"}
                )
                return str(answer.status), int(answer.status == 202)

            return self._window(send, groups, seconds)

    def _window(self, send: Send, groups: dict[str, int], seconds: float) -> Window:
        return measure(send, self._meter(groups), seconds, self._stored)

    # -- (c) ---------------------------------------------------------------------------------

    def chain(self, load: int, one_at_a_time: int, warm: int = 10) -> Chain:
        with self.roles("worker") as groups:
            client = Client(PORTS["execute"])
            if self._wait(self._start_many(client, warm), timeout=60) < warm:
                raise SystemExit(f"our warm-up chains did not end; see {self.procs.log_dir}")
            meter = self._meter(groups)
            before = meter.read()
            begin = time.perf_counter()
            loaded = self._start_many(client, load)
            ended = self._wait(loaded)
            wall = time.perf_counter() - begin
            cpu = meter.since(before)
            single = json.dumps({"path": "bench/three", "workload": {"i": 0}}).encode()
            alone = []
            for _ in range(one_at_a_time):
                answer = client.post("/api/execute", single, self.auth)
                if answer.status != 202:
                    raise SystemExit(f"our execute role answered {answer.status}: {answer.data[:300]!r}")
                alone.append(int(answer.json()["execution_id"]))
                self._wait(alone[-1:], interval=0.01)
            failed = scalar(
                self.db,
                "SELECT count(*) FROM execution WHERE execution_id = ANY(%s) AND status <> 'completed'",
                loaded + alone,
            )
        return Chain(
            workflows=load,
            ended=ended,
            wall=wall,
            cpu=cpu,
            steps_load=column(self.db, STEPS, loaded),
            steps_alone=column(self.db, STEPS, alone),
            chains_alone=column(self.db, CHAINS, alone),
            not_completed=int(failed),
            push=self.push_round_trips(),
        )

    def push_round_trips(self, messages: int = 20) -> list[float]:
        """Seconds from publishing a message to an empty loopback handler's receipt, one at a time:
        what the emulator's push alone adds to every step."""
        received = threading.Event()

        class Empty(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(204)
                self.end_headers()
                received.set()

            def log_message(self, *_args: object) -> None:
                pass

        server = ThreadingHTTPServer((HOST, 0), Empty)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        name = f"peers-push-{secrets.token_hex(3)}"
        topic, sub = f"projects/{PROJECT}/topics/{name}", f"projects/{PROJECT}/subscriptions/{name}"
        self.publisher.create_topic(name=topic)
        endpoint = {"push_endpoint": f"http://{HOST}:{server.server_port}/"}
        self.subscriber.create_subscription(request={"name": sub, "topic": topic, "push_config": endpoint})
        seconds = []
        try:
            for _ in range(messages):
                received.clear()
                begin = time.perf_counter()
                self.publisher.publish(topic, b"{}").result()
                if received.wait(30):
                    seconds.append(time.perf_counter() - begin)
        finally:
            self.subscriber.delete_subscription(subscription=sub)
            self.publisher.delete_topic(topic=topic)
            server.shutdown()
        return seconds

    def _start_many(self, client: Client, n: int) -> list[int]:
        ids: list[int] = []
        for offset in range(0, n, 100):
            runs = [{"path": "bench/three", "workload": {"i": offset + i}} for i in range(min(100, n - offset))]
            answer = client.post("/api/execute/batch", json.dumps({"executions": runs}).encode(), self.auth)
            if answer.status != 200:
                raise SystemExit(f"our execute role answered {answer.status}: {answer.data[:300]!r}")
            ids += [int(r["execution_id"]) for r in answer.json()["results"] if r.get("execution_id")]
        return ids

    def _wait(self, ids: list[int], interval: float = 0.1, timeout: float = 300) -> int:
        """Until every execution of ``ids`` has ended; how many did."""
        wait_until(lambda: int(scalar(self.db, ENDED, ids)) >= len(ids), timeout=timeout, interval=interval)
        return int(scalar(self.db, ENDED, ids))


def private_emulator(log_dir: Path, port: int) -> int:
    """A Pub/Sub emulator of this run's own (the stack's way of starting one, its data under ``log_dir``):
    its CPU is then ours alone, whatever else publishes to the stack's emulator meanwhile. Its pgid."""
    if port_open(port):
        raise SystemExit(f"port {port} is taken: the benchmark's Pub/Sub emulator cannot start")
    emulator = emulators.pubsub(log_dir / "pubsub-state", port)
    pgid = emulator.start()
    if not wait_until(emulator.healthy, timeout=60):
        stop_group(pgid)
        raise SystemExit(f"the benchmark's Pub/Sub emulator did not start; see {emulator.log_path}")
    return pgid
