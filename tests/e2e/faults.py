"""The private stack of the fault-injection suite (tests/e2e/test_faults.py) and its drivers.

One :class:`FaultStack` per module: its own LocalStack (state folder under a tmp path, its own port
range), every role started on a fixed port of that range under gunicorn (the runtime as its
container runs it), the Pub/Sub topics and push subscriptions Terraform would create, the stack's own
scheduler component running the maintenance schedule (noetl_cloud.maintenance.schedule: reaper, outbox
sweep, frame reaper, projector catch-up, spool drain) every second, and an effect sink: the playbook's
one task POSTs its message key there, so a message that ran twice is seen twice.

Nothing here fakes a service: PostgreSQL, the Pub/Sub and Firestore emulators and fake-gcs-server
are the real components of the local stack; the faults are real signals to real processes.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import urllib3
from google.api_core.exceptions import AlreadyExists
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1, storage
from sqlalchemy import Engine, create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.components import PROJECT_ID
from noetl_cloud.local.layout import ROLE_PORTS
from noetl_cloud.local.process import stop_group, wait_until
from noetl_cloud.local.stack import ROLE_WORKERS, LocalStack
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.faults_frames import frames_playbook
from tests.e2e.roles import ROOT, answering, spawn, start, start_runtime, stop_all
from tests.e2e.test_subscription_runtime import subscription as pull_subscription

TOKEN = secrets.token_hex(16)
PUSH_TOKEN = secrets.token_hex(12)
ENDED = ("completed", "failed", "cancelled")
COMMANDS = "noetl-commands-shared"
EVENTS = "noetl-events"
INBOUND = "faults-inbound"  # the topic a source publishes to; pushed to the ingress
PULL = "faults-pull"  # the topic the subscription runtime pulls
LISTENER = "faults"
PLAYBOOK = "faults/effect"
ROLES = ("execute", "worker", "projector", "frames", "ingress", "spool_drainer")

PLAYBOOK_YAML = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: effect, path: {path}}}
workload: {{effect_url: "{effect_url}", payload: {{}}}}
workflow:
  - step: start
    tool:
      kind: http
      method: POST
      url: "{{{{ workload.effect_url }}}}"
      headers: {{Idempotency-Key: "{{{{ workload.payload.key }}}}"}}
      json: {{key: "{{{{ workload.payload.key }}}}"}}
"""

PUSH_SUBSCRIPTION = f"""\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: {LISTENER}, path: subscriptions/{LISTENER}}}
spec:
  source: pubsub
  mode: push
  ingress:
    gateway_path: /ingress/{LISTENER}
    verify: {{type: bearer, query_param: token, secret: push_token}}
  dispatch: {{playbook: {PLAYBOOK}, payload_from: message.json}}
  headers:
    directives:
      - {{header: x-idempotency-key, controls: idempotency_key}}
  dedup: {{enabled: true, window_secs: 3600}}
  spool:
    mode: buffer_and_ack
    backend: gcs
    ordering: none
    circuit: {{trip_after: 3, probe_after_ms: 500}}
    drain: {{rate_per_sec: 200, max_replay_attempts: 10}}
"""


class EffectSink:
    """The external system the playbook acts on. It counts the POSTs per message key (``calls``) and
    the effects it applied (``counts``): like a payments API, it applies a request whose
    ``Idempotency-Key`` it has already applied no second time (it answers it as the first)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.applied: set[str] = set()  # the idempotency keys applied
        self.first: dict[str, float] = {}  # the monotonic time of each key's first effect
        self.delay_s = 0.0  # how long the external system takes per call (the frames scenario slows it)
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                key = str(body.get("key"))
                if sink.delay_s:
                    time.sleep(sink.delay_s)  # the external system's own latency, not a wait in a test
                idempotency_key = self.headers.get("Idempotency-Key")
                with sink._lock:
                    sink.calls[key] += 1
                    if idempotency_key is None or idempotency_key not in sink.applied:
                        sink.counts[key] += 1
                        sink.first.setdefault(key, time.monotonic())
                    if idempotency_key is not None:
                        sink.applied.add(idempotency_key)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/effect"

    def of(self, keys: Iterable[str]) -> dict[str, int]:
        """The effects applied per key."""
        with self._lock:
            return {key: self.counts.get(key, 0) for key in keys}

    def resent(self, keys: Iterable[str]) -> int:
        """Calls beyond the first per key (a task that ran again), applied or not."""
        with self._lock:
            return sum(max(0, self.calls.get(key, 0) - 1) for key in keys)

    def done_at(self, keys: Iterable[str]) -> float | None:
        """When the last of ``keys`` got its first effect (monotonic); ``None`` while one has none."""
        with self._lock:
            times = [self.first.get(key) for key in keys]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Outcome:
    """What one scenario measured."""

    scenario: str
    messages_in: int
    executions: int = 0
    duplicates: int = 0
    lost: int = 0
    terminal: int = 0
    completed: int = 0
    effect_reruns: int = 0  # effects applied twice (or more) for one key
    resent: int = 0  # calls repeated for one key (a task run again), absorbed by the idempotency key
    reissued: int = 0  # commands issued again because their claim lease ran out (their effect may rerun)
    parity_ok: int = 0
    seconds: float = 0.0
    recovery_s: float | None = None  # from the fault's injection until every message's effect was done
    notes: list[str] = field(default_factory=list)


class FaultStack:
    """The suite's own stack and roles; every role can be SIGKILLed and started again on its port."""

    def __init__(self, state_dir: Path, port_base: int) -> None:
        self.stack = LocalStack(state_dir, port_base, root=ROOT)
        self.port_base = port_base
        self.env: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.sink = EffectSink()
        self.http = urllib3.PoolManager(maxsize=16)
        self.engine: Engine | None = None
        self.api: ApiClient | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def port(self, role: str) -> int:
        return self.port_base + ROLE_PORTS[role]

    def url(self, role: str) -> str:
        return f"http://127.0.0.1:{self.port(role)}"

    def up(self) -> None:
        base = self.stack.up(echo=lambda _line: None)
        self.bucket = f"faults-spool-{secrets.token_hex(4)}"
        self.env = {
            **base,
            "NOETL_PROJECT_ID": PROJECT_ID,
            "NOETL_POOLS": "shared",
            "NOETL_INTERNAL_API_TOKEN": TOKEN,
            "NOETL_API_URL": self.url("execute"),
            "NOETL_WORKER_POOL": "shared",
            "NOETL_WORKER_PUSH_TOKEN": PUSH_TOKEN,
            "NOETL_PROJECTOR_PUSH_TOKEN": PUSH_TOKEN,
            "NOETL_SECRET_PUSH_TOKEN": PUSH_TOKEN,
            # The playbook's http task POSTs to the effect sink on loopback: allowed by port, explicitly.
            "NOETL_HTTP_TOOL_ALLOW": "127.0.0.1:" + self.sink.url.rsplit(":", 1)[1].split("/", 1)[0],
            # A killed worker's command is re-issued by the reaper once its lease (heartbeated every
            # second) has run out.
            "NOETL_COMMAND_LEASE_S": "4",
            "NOETL_WORKER_HEARTBEAT_S": "1",
            "NOETL_COMMAND_MAX_ATTEMPTS": "6",
            # A notification the broker lost (the emulator restarted) is published again by the reaper,
            # and a projection whose deliveries were lost is folded by the catch-up, in seconds here.
            "NOETL_COMMAND_RENOTIFY_AFTER_S": "10",
            "NOETL_PROJECTOR_CATCHUP_SETTLE_S": "3",
            # A killed runtime's leased messages come back when their lease runs out (as the crash tests).
            "NOETL_RUNTIME_LEASE_EXTENSION_S": "10",
            "NOETL_SPOOL_BUCKET": self.bucket,
            "NOETL_SPOOL_LEASE_TTL_S": "3",
            "NOETL_SPOOL_DRAINER_URL": self.url("spool_drainer"),
            "NOETL_KV_COLLECTION": f"faults-{secrets.token_hex(4)}",
            # Cursor loops claim, heartbeat and commit their frames on the frames role.
            "NOETL_FRAMES_URL": self.url("frames"),
        }
        for key in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"):
            os.environ[key] = self.env[key]
        self.engine = create_engine(normalize_url(self.env["NOETL_DATABASE_URL"]), pool_pre_ping=True)
        gcs = storage.Client(
            project=PROJECT_ID,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.env["STORAGE_EMULATOR_HOST"]},
        )
        gcs.create_bucket(self.bucket)
        gcs.close()
        self.ensure_pubsub()
        self.start_roles(ROLES)
        self.api = ApiClient(self.url("execute"), token_source=static_token(TOKEN), timeout_s=30)
        self.api.post(
            "/api/catalog", json={"content": PLAYBOOK_YAML.format(path=PLAYBOOK, effect_url=self.sink.url)}
        ).raise_for_error()
        self.api.post("/api/catalog", json={"content": PUSH_SUBSCRIPTION}).raise_for_error()
        sid = self.api.post("/api/subscriptions/register", json={"path": f"subscriptions/{LISTENER}"}).json[
            "subscription_id"
        ]
        self.api.post(f"/api/subscriptions/{sid}/activate").raise_for_error()
        content = pull_subscription(
            "faults-pull",
            f"projects/{PROJECT_ID}/subscriptions/{PULL}",
            dispatch={"playbook": PLAYBOOK},
            headers={"directives": [{"header": "x-idempotency-key", "controls": "idempotency_key"}]},
            dedup={"enabled": True, "window_secs": 3600},
            runtime={"max_in_flight": 50},
        )
        self.api.post("/api/catalog", json={"content": content}).raise_for_error()
        self.api.post("/api/catalog", json={"content": frames_playbook(self.sink.url)}).raise_for_error()
        self.start_role("subscription_runtime")
        # Cloud Scheduler's jobs, as the local stack runs them, every second instead of each job's period.
        self.stack.start_scheduler({**self.env, "NOETL_SCHEDULER_EVERY_S": "1"}, echo=lambda _line: None)

    def down(self) -> None:
        stop_all(self.procs.pop(name) for name in list(self.procs))  # all at once
        if self.api is not None:
            self.api.close()
        if self.engine is not None:
            self.engine.dispose()
        self.sink.close()
        self.stack.down(echo=lambda _line: None, purge=True)

    # -- roles ----------------------------------------------------------------------------------

    def role_env(self, name: str) -> dict[str, str]:
        if name == "worker":
            return {**self.env, "NOETL_WORKER_ID": f"worker-faults-{time.monotonic_ns()}"}
        if name == "subscription_runtime":
            return {**self.env, "NOETL_SUBSCRIPTION_PATH": "subscriptions/faults-pull", "NOETL_RUNTIME_POLL_S": "0.5"}
        return self.env

    def start_role(self, name: str) -> None:
        if name == "subscription_runtime":
            self.procs[name] = start_runtime(self.role_env(name), self.port(name))
            assert wait_until(lambda: self.runtime_phase() == "pulling", timeout=60), self.runtime_phase()
            return
        self.procs[name] = start(name, self.role_env(name), self.port(name), **self.sizing(name))

    def start_roles(self, names: Iterable[str]) -> None:
        """Start several roles at once (each on its port), then wait until each answers (60 s each, not
        30: they start side by side on a loaded machine)."""
        spawned = {name: spawn(name, self.role_env(name), self.port(name), **self.sizing(name)) for name in names}
        self.procs.update(spawned)  # stopped by ``down`` whatever happens next
        for name, proc in spawned.items():
            answering(name, proc, self.port(name), timeout=60)

    def sizing(self, name: str) -> dict[str, int]:
        # One ingress process, as its container runs it (functions/entrypoint.sh): the listener
        # configuration it keeps serving while the control plane is down is per process.
        return {
            "workers": ROLE_WORKERS.get(name, 2),
            "threads": {"worker": 8, "execute": 8, "projector": 4}.get(name, 4),
        }

    def kill_role(self, name: str) -> float:
        """SIGKILL the role's whole process group (gunicorn's arbiter and its workers); when (monotonic)."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        at = time.monotonic()
        proc.wait()
        return at

    def ensure_ready(self) -> None:
        """Every component and role running, as after ``up``, whatever the scenario before left behind
        (a scenario that failed midway may have left execute stopped or a component down)."""
        if not all(component.healthy() for component in self.stack.components().values()):
            self.start_components()
            self.ensure_pubsub()
        for name in (*ROLES, "subscription_runtime"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                self.procs.pop(name, None)
                self.start_role(name)

    def stop_role(self, name: str) -> None:
        proc = self.procs.pop(name)
        stop_group(proc.pid, timeout=10)
        proc.wait()

    def runtime_phase(self) -> str:
        try:
            response = self.http.request("GET", f"{self.url('subscription_runtime')}/status", timeout=5)
            return str(json.loads(response.data).get("phase"))
        except (urllib3.exceptions.HTTPError, ValueError):
            return "down"

    # -- components -----------------------------------------------------------------------------

    def stop_component(self, name: str) -> float:
        """Stop one of the stack's components; when (monotonic)."""
        recorded = self.stack._load()["components"][name]
        self.stack.components()[name].stop(int(recorded["pid"]))
        return time.monotonic()

    def start_components(self) -> None:
        """``up`` again: starts what is not running (and re-applies migrations and topics)."""
        self.stack.up(echo=lambda _line: None)

    # -- Pub/Sub: what Terraform creates --------------------------------------------------------

    def ensure_pubsub(self) -> None:
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        try:
            for topic in (COMMANDS, EVENTS, INBOUND, PULL):
                try:
                    publisher.create_topic(name=publisher.topic_path(PROJECT_ID, topic))
                except AlreadyExists:
                    pass
            pushes = [
                (COMMANDS, f"{COMMANDS}-worker", f"{self.url('worker')}/?token={PUSH_TOKEN}", False),
                (EVENTS, f"{EVENTS}-projector", f"{self.url('projector')}/?token={PUSH_TOKEN}", True),
                (INBOUND, f"{INBOUND}-ingress", f"{self.url('ingress')}/ingress/{LISTENER}?token={PUSH_TOKEN}", False),
            ]
            for topic, name, endpoint, ordered in pushes:
                request: dict[str, Any] = {
                    "name": subscriber.subscription_path(PROJECT_ID, name),
                    "topic": publisher.topic_path(PROJECT_ID, topic),
                    "push_config": {"push_endpoint": endpoint},
                    "ack_deadline_seconds": 30,
                    "enable_message_ordering": ordered,
                }
                try:
                    subscriber.create_subscription(request=request)
                except AlreadyExists:
                    pass
            try:
                subscriber.create_subscription(
                    name=subscriber.subscription_path(PROJECT_ID, PULL),
                    topic=publisher.topic_path(PROJECT_ID, PULL),
                    ack_deadline_seconds=10,
                )
            except AlreadyExists:
                pass
        finally:
            subscriber.close()

    def prime_ingress(self, key: str) -> None:
        """One delivery through the ingress, executed: the ingress has then fetched the listener's
        configuration, which it keeps serving while the control plane is down (a fresh ingress that
        never reached the control plane cannot verify a delivery, and answers 503 instead of spooling)."""
        self.publish(INBOUND, [key])
        wait_until(
            lambda: bool(self.sql("SELECT 1 FROM execution WHERE workload->'payload'->>'key' = :k", k=key)),
            timeout=60,
            interval=0.3,
        ) or _fail(f"the priming delivery {key!r} never ran")

    def publish(self, topic: str, keys: list[str], pace_s: float = 0.0) -> None:
        publisher = pubsub_v1.PublisherClient()
        path = publisher.topic_path(PROJECT_ID, topic)
        futures = []
        for key in keys:
            futures.append(publisher.publish(path, json.dumps({"key": key}).encode(), **{"x-idempotency-key": key}))
            if pace_s:
                time.sleep(pace_s)
        for future in futures:
            future.result(timeout=60)

    # -- the execute API driver -----------------------------------------------------------------

    def submit(self, key: str, deadline_s: float = 180.0) -> None:
        """One client request, retried until accepted (the dedup key makes a retry idempotent)."""
        body = {
            "path": PLAYBOOK,
            "workload": {"payload": {"key": key}},
            "dedup": {"key": key, "window_secs": 3600},
            "meta": {"message_id": key},
        }
        deadline = time.monotonic() + deadline_s
        pause = 0.2
        while True:
            try:
                response = self.http.request(
                    "POST",
                    self.url("execute") + "/api/execute",
                    body=json.dumps(body).encode(),
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                    timeout=urllib3.Timeout(connect=2, read=20),
                    retries=False,
                )
                if response.status in (200, 201, 202):
                    return
                if response.status < 500 and response.status != 429:
                    raise AssertionError(f"execute refused {key}: {response.status} {response.data[:300]!r}")
            except urllib3.exceptions.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"execute never accepted {key}")
            time.sleep(pause)
            pause = min(2.0, pause * 2)

    def submit_all(self, keys: list[str], pace_s: float = 0.0) -> threading.Thread:
        """Submit ``keys`` from 8 client threads, in the background; the thread to join."""

        def run() -> None:
            with ThreadPoolExecutor(8) as pool:
                futures = []
                for key in keys:
                    futures.append(pool.submit(self.submit, key))
                    if pace_s:
                        time.sleep(pace_s)
                for future in futures:
                    future.result()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    # -- measuring ------------------------------------------------------------------------------

    def spooled(self) -> int:
        """Items waiting in the spool's bucket (dead letters aside); 0 while GCS is away."""
        gcs = storage.Client(
            project=PROJECT_ID,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.env["STORAGE_EMULATOR_HOST"]},
        )
        try:
            return sum(1 for blob in gcs.list_blobs(self.bucket) if "/dlq/" not in blob.name)
        except Exception:  # noqa: BLE001 - fake-gcs-server may be the component taken away
            return 0
        finally:
            gcs.close()

    def sql(self, statement: str, **params: Any) -> list[Any]:
        assert self.engine is not None
        with self.engine.connect() as conn:
            return list(conn.execute(text(statement), params).all())

    def sql_write(self, statement: str, **params: Any) -> None:
        assert self.engine is not None
        with self.engine.begin() as conn:
            conn.execute(text(statement), params)

    def executions(self, scenario: str) -> list[Any]:
        """(execution_id, status, key) of every execution of the scenario's messages."""
        try:
            return self.sql(
                "SELECT execution_id, status, workload->'payload'->>'key' AS key FROM execution "
                "WHERE path = :p AND workload->'payload'->>'key' LIKE :k",
                p=PLAYBOOK,
                k=f"{scenario}-%",
            )
        except Exception:  # noqa: BLE001 - PostgreSQL may be the component being restarted
            return []

    def settled(self, scenario: str, keys: list[str]) -> bool:
        rows = self.executions(scenario)
        return {r.key for r in rows} >= set(keys) and all(r.status in ENDED for r in rows)

    def verify(self, execution_id: int) -> bool:
        query = f"tenant_id=default&organization_id=default&execution_id={execution_id}"
        response = self.http.request(
            "GET",
            f"{self.url('execute')}/api/replay/verify?{query}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert response.status == 200, response.data[:300]
        return bool(json.loads(response.data)["ok"])

    def parity(self, execution_ids: list[int], timeout: float = 90.0) -> int:
        """How many executions' projections equal a fresh fold, waiting for the projector to catch up."""
        pending = set(execution_ids)
        deadline = time.monotonic() + timeout
        with ThreadPoolExecutor(4) as pool:
            while pending:  # at least one pass, also with no time to wait
                done = dict(zip(pending, pool.map(self.verify, pending), strict=True))
                pending = {eid for eid, ok in done.items() if not ok}
                if not pending or time.monotonic() >= deadline:
                    break
                time.sleep(1.0)
        return len(execution_ids) - len(pending)

    def measure(self, outcome: Outcome, keys: list[str], parity_wait_s: float = 90.0) -> Outcome:
        rows = self.executions(outcome.scenario)
        per_key = Counter(r.key for r in rows)
        outcome.executions = len(rows)
        outcome.duplicates = sum(n - 1 for n in per_key.values() if n > 1)
        outcome.lost = sum(1 for key in keys if per_key.get(key, 0) == 0)
        outcome.terminal = sum(1 for r in rows if r.status in ENDED)
        outcome.completed = sum(1 for r in rows if r.status == "completed")
        effects = self.sink.of(keys)
        outcome.effect_reruns = sum(n - 1 for n in effects.values() if n > 1)
        outcome.resent = self.sink.resent(keys)
        outcome.reissued = int(
            self.sql(
                "SELECT count(*) AS n FROM event WHERE event_type = 'command.issued' "
                "AND payload->>'reason' = 'lease_expired' AND execution_id = ANY(:ids)",
                ids=[int(r.execution_id) for r in rows],
            )[0].n
        )
        missing_effects = [k for k, n in effects.items() if n == 0]
        if missing_effects:
            outcome.notes.append(f"{len(missing_effects)} keys without an effect")
        outcome.parity_ok = self.parity([int(r.execution_id) for r in rows], timeout=parity_wait_s)
        return outcome


def _fail(message: str) -> None:
    raise AssertionError(message)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    assert wait_until(check, timeout=timeout, interval=0.3), f"timed out after {timeout:.0f} s waiting for {what}"


__all__ = ["ENDED", "FaultStack", "Outcome", "wait_for"]
