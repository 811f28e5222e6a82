"""The real Pub/Sub emulator pushes to the ingress role: 50 published messages become 50
executions; a delivery nacked while the control plane is down is redelivered and still makes
exactly one execution."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from google.cloud import pubsub_v1
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.process import stop_group, wait_until
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import free_port, role, start
from tests.e2e.telemetry_files import metric_total, metrics_env
from tests.integration.control_fixtures import PROJECT, TOKEN, Topics, events_topic_for, playbook

PUSH_TOKEN = secrets.token_hex(12)
SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: sensors, path: subscriptions/sensors}
spec:
  source: pubsub
  mode: push
  ingress:
    gateway_path: /ingress/sensors
    verify: {type: bearer, query_param: token, secret: push_token}
  dispatch: {playbook: domain/ingest, payload_from: message.json}
  dedup: {enabled: true, window_secs: 3600}
"""


def executions(database_url: str) -> list[str]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT meta->>'message_id' FROM execution")).scalars())
    finally:
        engine.dispose()


def eventually(check: Callable[[], bool], timeout: float = 90) -> bool:
    return wait_until(check, timeout=timeout, interval=0.5)


def start_execute(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return start("execute", env, port, workers=1, threads=8)


def test_emulator_push_makes_one_execution_per_message_even_after_a_nack(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics, tmp_path: Path
) -> None:
    env = {
        **local_env,
        **metrics_env(tmp_path),  # the ingress's counters, through the local OpenTelemetry exporter
        "NOETL_DATABASE_URL": database_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": topic_prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(topic_prefix),
        "NOETL_POOLS": "shared,iot",
        "NOETL_SECRET_PUSH_TOKEN": PUSH_TOKEN,
    }
    port = free_port()
    execute = start_execute(port, env)
    api_url = f"http://127.0.0.1:{port}"
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    suffix = secrets.token_hex(4)
    topic = publisher.topic_path(PROJECT, f"sensors-{suffix}")
    push_sub = subscriber.subscription_path(PROJECT, f"sensors-push-{suffix}")
    try:
        with role("ingress", {**env, "NOETL_API_URL": api_url}, workers=1) as ingress_url:
            with ApiClient(api_url, token_source=static_token(TOKEN)) as api:
                api.post("/api/catalog", json={"content": playbook("domain/ingest")}).raise_for_error()
                api.post("/api/catalog", json={"content": SUBSCRIPTION}).raise_for_error()
                sid = api.post("/api/subscriptions/register", json={"path": "subscriptions/sensors"}).json[
                    "subscription_id"
                ]
                api.post(f"/api/subscriptions/{sid}/activate").raise_for_error()
            publisher.create_topic(name=topic)
            subscriber.create_subscription(
                name=push_sub,
                topic=topic,
                ack_deadline_seconds=60,  # a slow first delivery on a loaded machine is not a nack
                push_config=pubsub_v1.types.PushConfig(
                    push_endpoint=f"{ingress_url}/ingress/sensors?token={PUSH_TOKEN}"
                ),
            )
            ids = [
                publisher.publish(topic, f'{{"reading": {n}}}'.encode(), device=f"d{n % 3}").result(timeout=30)
                for n in range(50)
            ]
            assert eventually(lambda: len(executions(database_url)) >= 50, timeout=240)
            assert sorted(executions(database_url)) == sorted(ids)

            # The control plane goes down: the next delivery is answered 503 (a nack) and redelivered.
            def received() -> int:
                return int(metric_total(tmp_path, "noetl.ingress_received"))

            before = received()
            stop_group(execute.pid, timeout=10)
            execute.wait()
            late = publisher.publish(topic, b'{"reading": 50}').result(timeout=30)
            assert eventually(lambda: received() > before, timeout=60)  # delivered, and refused
            assert executions(database_url).count(late) == 0
            execute = start_execute(port, env)
            assert eventually(lambda: late in executions(database_url))
            done = executions(database_url)
            assert len(done) == 51 and len(set(done)) == 51
    finally:
        for call in (
            lambda: subscriber.delete_subscription(subscription=push_sub),
            lambda: publisher.delete_topic(topic=topic),
        ):
            try:
                call()
            except Exception:  # noqa: BLE001, S110 - best-effort cleanup of emulator resources
                pass
        if execute.poll() is None:
            os.killpg(execute.pid, signal.SIGTERM)
            execute.wait()
