"""The breaker on a real downstream (issue 23 item 6, RFC §8.1 / OQ2), on the local stack.

Roles as deployed (gunicorn): execute, one worker (commands pushed by the Pub/Sub emulator), ingress,
spool drainer; PostgreSQL, the Firestore emulator (circuits), fake-gcs-server (the spool). The
subscription declares one downstream, an HTTP endpoint this test serves and breaks at will:

* the endpoint answers 503 -> ``trip_after`` executions fail (http_status 503 against the declared
  host) -> the execute role opens the subscription's downstream circuit in Firestore;
* new deliveries -> 202 ``spooled``, no execution started, the endpoint not called;
* the endpoint recovers -> the drainer's probe (the oldest spooled item, one execution) succeeds, its
  end closes the circuit; the drain replays the rest -> the endpoint sees every spooled message once,
  started in receive order; a live delivery then goes straight through.

Nothing sleeps for a fixed time: every wait polls its condition with a timeout.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from sqlalchemy import create_engine, text
from standardwebhooks.webhooks import Webhook

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.kv.firestore import FirestoreKeyValueStore
from noetl_cloud.local.process import stop_group, wait_until
from noetl_cloud.spool.circuit import CircuitBreaker, CircuitConfig
from noetl_cloud.spool.downstreams import downstream_id
from noetl_cloud.spool.gcs import GcsSpool
from tests.e2e.roles import free_port, start
from tests.e2e.test_distributed import Cluster, cluster
from tests.integration.control_fixtures import TOKEN, Topics

PROJECT = "noetl-local"
SUB = "subscriptions/orders"
SECRET = "whsec_" + base64.b64encode(b"downstream-breaker-std-webhooks!").decode()
TRIP_AFTER = 3

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: post-order, path: e2e/post_order}}
workload: {{payload: {{n: 0}}}}
workflow:
  - step: start
    tool:
      kind: http
      method: POST
      url: "http://127.0.0.1:{port}/orders"
      json: {{n: "{{{{ workload.payload.n }}}}"}}
"""

SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: orders, path: {sub}}}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/orders
    verify: {{type: standard_webhooks, secret: sw_secret}}
  dispatch: {{playbook: e2e/post_order, payload_from: message.json}}
  spool:
    mode: buffer_and_ack
    backend: gcs
    circuit: {{trip_after: {trip}, probe_after_ms: 1000}}
  downstreams:
    - name: orders-api
      http_hosts: ["127.0.0.1:{port}"]
"""


class Endpoint:
    """The downstream: answers ``status`` and records the ``n`` of every request it answered 2xx."""

    def __init__(self) -> None:
        self.status = 503
        self.calls = 0
        self.served: list[int] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                endpoint.calls += 1
                status = endpoint.status
                if status < 300:
                    endpoint.served.append(int(body["n"]))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def deliver(ingress_url: str, n: int) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"n": n}).encode()
    msg_id = f"order-{n}"
    now = datetime.now(UTC)
    headers = {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(msg_id, now, body.decode()),
    }
    response = urllib3.request("POST", f"{ingress_url}/ingress/orders", body=body, headers=headers, timeout=30.0)
    return response.status, json.loads(response.data)


def drain(drainer_url: str) -> dict[str, Any]:
    """What the stack's scheduler does every few seconds: ``POST /drain``."""
    response = urllib3.request(
        "POST",
        f"{drainer_url}/drain",
        body=json.dumps({"subscription": SUB}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        timeout=60.0,
    )
    assert response.status == 200, response.data
    (report,) = json.loads(response.data)["results"]
    return report  # type: ignore[no-any-return]


class Harness:
    def __init__(self, c: Cluster, endpoint: Endpoint, kv: FirestoreKeyValueStore, spool: GcsSpool, db: str) -> None:
        self.cluster, self.endpoint, self.kv, self.spool, self.database_url = c, endpoint, kv, spool, db
        self.ingress_url = ""
        self.drainer_url = ""

    def executions(self) -> list[Any]:
        engine = create_engine(normalize_url(self.database_url))
        try:
            with engine.connect() as conn:
                sql = "SELECT meta->>'message_id' AS mid, status FROM execution ORDER BY created_at, execution_id"
                return list(conn.execute(text(sql)).all())
        finally:
            engine.dispose()

    def query(self, sql: str) -> list[Any]:
        engine = create_engine(normalize_url(self.database_url))
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(sql)).all())
        finally:
            engine.dispose()

    def circuit(self) -> str:
        breaker = CircuitBreaker(self.kv, downstream_id(SUB, "orders-api"), CircuitConfig())
        return breaker.state().state


@pytest.fixture
def harness(database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics) -> Iterator[Harness]:
    endpoint = Endpoint()
    raw = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": local_env["STORAGE_EMULATOR_HOST"]},
    )
    bucket = f"spool-ds-{secrets.token_hex(6)}"
    raw.create_bucket(bucket)
    collection = f"spool-ds-{secrets.token_hex(6)}"
    drainer_port, ingress_port = free_port(), free_port()
    extra = {
        "NOETL_SECRET_SW_SECRET": SECRET,
        "NOETL_KV_COLLECTION": collection,
        "NOETL_SPOOL_BUCKET": bucket,
        "NOETL_SPOOL_LEASE_TTL_S": "2",
        "NOETL_SPOOL_DRAINER_URL": f"http://127.0.0.1:{drainer_port}",
        "NOETL_HTTP_TOOL_ALLOW": f"127.0.0.1:{endpoint.port}",
    }
    kv = FirestoreKeyValueStore(
        project_id=PROJECT, collection=collection, emulator_host=local_env["FIRESTORE_EMULATOR_HOST"]
    )
    spool = GcsSpool(bucket, endpoint=local_env["STORAGE_EMULATOR_HOST"], project_id=PROJECT)
    procs = []
    try:
        with cluster(database_url, local_env, topic_prefix, **extra) as c:
            c.register(PLAYBOOK.format(port=endpoint.port))
            c.register(SUBSCRIPTION.format(sub=SUB, trip=TRIP_AFTER, port=endpoint.port))
            sid = c.api.post("/api/subscriptions/register", json={"path": SUB}).raise_for_error().json
            c.api.post(f"/api/subscriptions/{sid['subscription_id']}/activate").raise_for_error()
            env = {**c.env, "NOETL_API_URL": f"http://127.0.0.1:{c.api_port}"}
            procs.append(start("ingress", env, ingress_port, workers=1))
            procs.append(start("spool_drainer", env, drainer_port, workers=1))
            h = Harness(c, endpoint, kv, spool, database_url)
            h.ingress_url, h.drainer_url = f"http://127.0.0.1:{ingress_port}", f"http://127.0.0.1:{drainer_port}"

            def answers() -> bool:
                try:
                    url = f"{h.ingress_url}/ingress/orders"
                    return urllib3.request("POST", url, body=b"{}", timeout=30.0).status == 401
                except urllib3.exceptions.HTTPError:
                    return False

            assert wait_until(answers, timeout=60)
            yield h
    finally:
        for proc in procs:
            stop_group(proc.pid)
            proc.wait()
        spool.close()
        kv.close()
        raw.close()
        endpoint.close()


def test_a_broken_downstream_opens_the_subscriptions_circuit_spools_and_replays_in_order_when_it_recovers(
    harness: Harness,
) -> None:
    h = harness
    # 1. The endpoint answers 503: trip_after executions fail against it, and the circuit opens.
    for n in range(TRIP_AFTER):
        status, body = deliver(h.ingress_url, n)
        assert (status, body["status"]) == (202, "accepted"), body
    assert wait_until(lambda: [r.status for r in h.executions()] == ["failed"] * TRIP_AFTER, timeout=90)
    assert wait_until(lambda: h.circuit() == "open", timeout=30), h.circuit()
    assert h.endpoint.calls == TRIP_AFTER and h.endpoint.served == []

    # 2. While it is open: new deliveries are spooled (202), no execution starts, the endpoint is not called.
    spooled = list(range(10, 16))
    for n in spooled:
        status, body = deliver(h.ingress_url, n)
        assert (status, body["status"]) == (202, "spooled"), body
    assert len(h.executions()) == TRIP_AFTER and h.endpoint.calls == TRIP_AFTER
    assert len(h.spool.list(SUB)) == len(spooled)

    # 3. The endpoint recovers: the drainer's probe (the oldest item) closes the circuit once its
    # execution completes; the drain replays the rest. The drains here stand for the stack's scheduler.
    h.endpoint.status = 200
    back = time.monotonic()

    def recovered() -> bool:
        if h.spool.list(SUB) or h.circuit() != "closed":
            drain(h.drainer_url)
            return False
        return True

    assert wait_until(recovered, timeout=120, interval=0.5), (h.circuit(), len(h.spool.list(SUB)))
    assert wait_until(lambda: len(h.endpoint.served) >= len(spooled), timeout=60), h.endpoint.served
    print(f"\ndownstream back: spool replayed {time.monotonic() - back:.1f} s later")
    # Each spooled message reached the endpoint exactly once; their executions started in receive order
    # (the spool orders dispatches; the worker runs started executions concurrently).
    assert sorted(h.endpoint.served) == spooled and len(h.endpoint.served) == len(spooled)
    runs = [r for r in h.executions() if r.mid in {f"order-{n}" for n in spooled}]
    assert [r.mid for r in runs] == [f"order-{n}" for n in spooled]
    assert wait_until(lambda: all(r.status == "completed" for r in h.executions()[TRIP_AFTER:]), timeout=60)

    # The probe was the oldest item, and its execution carried the probe's holder to its end.
    (probe,) = h.query("SELECT meta->>'message_id' AS mid FROM execution WHERE meta->'spool' ? 'probe'")
    assert probe.mid == f"order-{spooled[0]}"
    # The outage is in the event log: opened once by the execute role, closed once by the probe's end.
    circuit_events = h.query(
        "SELECT event_type, payload->>'downstream' AS downstream FROM event "
        "WHERE event_type LIKE 'subscription.circuit.%' ORDER BY event_id"
    )
    assert [(e.event_type, e.downstream) for e in circuit_events] == [
        ("subscription.circuit.opened", downstream_id(SUB, "orders-api")),
        ("subscription.circuit.closed", downstream_id(SUB, "orders-api")),
    ]

    # 4. Live traffic goes straight through again.
    status, body = deliver(h.ingress_url, 99)
    assert (status, body["status"]) == (202, "accepted"), body
    assert wait_until(lambda: h.endpoint.served[-1:] == [99], timeout=60), h.endpoint.served
    assert sorted(h.endpoint.served) == [*spooled, 99]
