"""The subscription runtime (Mode B) on the local stack: the real Pub/Sub emulator's streaming pull,
the execute role (and workers, where executions must complete), PostgreSQL.

Each test runs ``functions/subscription_runtime/main.py`` the way the container does and checks
the executions and events the control plane recorded: directives and trace, the lifecycle trail
through pause / resume / SIGTERM, batch dispatch, the dedup window, the rate governor, and a
SIGKILL with messages in flight.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import urllib3
import yaml
from google.cloud import pubsub_v1
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.process import stop_group, wait_until
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import free_port, start, start_runtime, stop_all
from tests.e2e.test_distributed import cluster
from tests.integration.control_fixtures import (
    PROJECT,
    TOKEN,
    Topics,
    command_topics,
    events_topic_for,
    make_settings,
    playbook,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def subscription(name: str, pull: str, **spec: Any) -> str:
    body: dict[str, Any] = {
        "source": "pubsub",
        "mode": "pull",
        "subscription": pull,
        "dispatch": {"playbook": "domain/ingest", "payload_from": "message.json"},
        "headers": {
            "directives": [
                {"header": "x-noetl-route", "controls": "dispatch.playbook", "allowed": ["domain/fraud"]},
                {"header": "x-idempotency-key", "controls": "idempotency_key"},
            ],
            "trace": {"propagate": "w3c"},
        },
    }
    for key, value in spec.items():
        body[key] = {**body.get(key, {}), **value}
    return yaml.safe_dump(
        {
            "apiVersion": "noetl.io/v1",
            "kind": "Subscription",
            "metadata": {"name": name, "path": f"subscriptions/{name}"},
            "spec": body,
        }
    )


class Harness:
    """One subscription on the emulator, registered in the control plane at ``api_url``."""

    def __init__(self, database_url: str, env: dict[str, str], api_url: str) -> None:
        self.database_url = database_url
        self.env = env
        self.api = ApiClient(api_url, token_source=static_token(TOKEN), timeout_s=30)
        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        suffix = secrets.token_hex(4)
        self.name = f"rt-{suffix}"
        self.path = f"subscriptions/{self.name}"
        self.topic = self.publisher.topic_path(PROJECT, f"rt-{suffix}")
        self.pull = self.subscriber.subscription_path(PROJECT, f"rt-pull-{suffix}")
        self.publisher.create_topic(name=self.topic)
        self.subscriber.create_subscription(name=self.pull, topic=self.topic, ack_deadline_seconds=10)
        self.runtime: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.http = urllib3.PoolManager()
        for path in ("domain/ingest", "domain/fraud"):
            self.api.post("/api/catalog", json={"content": playbook(path)}).raise_for_error()

    def register(self, **spec: Any) -> None:
        content = subscription(self.name, self.pull, **spec)
        self.api.post("/api/catalog", json={"content": content}).raise_for_error()

    def publish(self, data: dict[str, Any], **attributes: str) -> str:
        return str(self.publisher.publish(self.topic, json.dumps(data).encode(), **attributes).result(timeout=30))

    def publish_many(self, count: int) -> list[str]:
        futures = [self.publisher.publish(self.topic, json.dumps({"n": n}).encode()) for n in range(count)]
        return [str(f.result(timeout=60)) for f in futures]

    def start(self, **extra: str) -> None:
        self.runtime = self.launch(self.port, **extra)

    def launch(self, port: int, **extra: str) -> subprocess.Popen[bytes]:
        """One more runtime instance of this subscription, health on ``port``, once it pulls."""
        env = {
            **self.env,
            "NOETL_API_URL": str(self.api.base_url),
            "NOETL_SUBSCRIPTION_PATH": self.path,
            "NOETL_RUNTIME_POLL_S": "0.2",
            **extra,
        }
        proc = start_runtime(env, port)
        assert wait_until(lambda: self.status(port)["phase"] == "pulling", timeout=30), self.status(port)
        return proc

    def status(self, port: int | None = None) -> dict[str, Any]:
        url = f"http://127.0.0.1:{port or self.port}/status"
        return json.loads(self.http.request("GET", url).data)  # type: ignore[no-any-return]

    def state(self, sid: str) -> str:
        return str(self.api.get(f"/api/subscriptions/{sid}").raise_for_error().json["state"])

    def metric(self, name: str) -> float:
        text_ = self.http.request("GET", f"http://127.0.0.1:{self.port}/metrics").data.decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text_.splitlines() if line.startswith(name))

    def signal(self, signum: int) -> int:
        assert self.runtime is not None
        os.killpg(self.runtime.pid, signum)
        code = self.runtime.wait(timeout=30)
        self.runtime = None
        return code

    def sql(self, statement: str, **params: Any) -> list[Any]:
        engine = create_engine(normalize_url(self.database_url))
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(statement), params).all())
        finally:
            engine.dispose()

    def executions(self) -> list[Any]:
        return self.sql(
            "SELECT execution_id, path, status, trace, meta FROM execution WHERE meta->>'subscription_path' = :p",
            p=self.path,
        )

    def message_ids(self) -> list[str]:
        return [row.meta["message_id"] for row in self.executions()]

    def events(self, event_type: str) -> list[Any]:
        """The events of ``event_type`` on this subscription's streams (``subscription/<id>...``: the
        database may hold other subscriptions')."""
        return self.sql(
            "SELECT stream_id, payload, meta FROM event WHERE event_type = :t AND stream_id LIKE :s",
            t=event_type,
            s=f"subscription/{self.subscription_id()}%",
        )

    def subscription_id(self) -> str:
        sid = self.status().get("subscription_id")
        assert sid, self.status()
        return str(sid)

    def trail(self, sid: str) -> list[str]:
        rows = self.sql(
            "SELECT event_type FROM event WHERE stream_id = :s ORDER BY stream_version", s=f"subscription/{sid}"
        )
        return [r.event_type for r in rows]

    def close(self) -> None:
        if self.runtime is not None and self.runtime.poll() is None:
            stop_group(self.runtime.pid)
            self.runtime.wait()
        for call in (
            lambda: self.subscriber.delete_subscription(subscription=self.pull),
            lambda: self.publisher.delete_topic(topic=self.topic),
        ):
            try:
                call()
            except Exception:  # noqa: BLE001, S110 - best-effort cleanup of emulator resources
                pass
        self.subscriber.close()
        self.api.close()


def control_env(database_url: str, local_env: dict[str, str], prefix: str) -> dict[str, str]:
    return {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_PROJECT_ID": PROJECT,
        "NOETL_POOLS": "shared,iot",
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(prefix),
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
    }


@contextmanager
def execute_only(database_url: str, local_env: dict[str, str], prefix: str) -> Iterator[Harness]:
    """The control plane alone: executions are started (and counted), no worker runs them."""
    env = control_env(database_url, local_env, prefix)
    port = free_port()
    execute = start("execute", env, port, workers=2, threads=8)
    harness = Harness(database_url, env, f"http://127.0.0.1:{port}")
    try:
        yield harness
    finally:
        harness.close()  # the runtime first: it drains its messages through execute
        stop_all([execute])


@pytest.fixture(scope="module")
def control_plane(module_database_url: str, local_env: dict[str, str]) -> Iterator[tuple[str, dict[str, str], str]]:
    """The control plane alone (executions are started and counted, no worker runs them), started once
    for the module's tests that need nothing else: its database, command topics and execute role. Each
    test brings its own subscription, topic and runtime, and reads only its own subscription's
    executions and events. (database URL, the roles' environment, execute's base URL)"""
    prefix = f"t{secrets.token_hex(4)}-commands-"
    with command_topics(make_settings(module_database_url, local_env, prefix)):
        env = control_env(module_database_url, local_env, prefix)
        port = free_port()
        execute = start("execute", env, port, workers=2, threads=8)
        try:
            yield module_database_url, env, f"http://127.0.0.1:{port}"
        finally:
            stop_all([execute])


@pytest.fixture
def plane(control_plane: tuple[str, dict[str, str], str]) -> Iterator[Harness]:
    harness = Harness(*control_plane)
    try:
        yield harness
    finally:
        harness.close()  # its runtime (drained through execute), topic and subscription


def test_six_messages_run_to_completion_with_routes_trace_and_the_whole_lifecycle_trail(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics
) -> None:
    with cluster(database_url, local_env, topic_prefix) as stack:
        harness = Harness(database_url, stack.env, str(stack.api.base_url))
        try:
            harness.register()
            # A stream cancelled by the pause leaves what the emulator had pushed to it leased until the
            # lease runs out: a short lease keeps the resumed delivery within the test's wait.
            harness.start(NOETL_RUNTIME_LEASE_EXTENSION_S="10")
            sid = harness.subscription_id()
            ids = [
                harness.publish(
                    {"n": n}, traceparent=TRACEPARENT, **({"x-noetl-route": "domain/fraud"} if n < 2 else {})
                )
                for n in range(6)
            ]
            assert wait_until(
                lambda: [r.status for r in harness.executions()].count("completed") == 6, timeout=90, interval=0.3
            ), harness.executions()
            runs = harness.executions()
            assert sorted(r.meta["message_id"] for r in runs) == sorted(ids)
            assert sorted(r.path for r in runs) == ["domain/fraud"] * 2 + ["domain/ingest"] * 4
            assert all(r.trace["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1] for r in runs)
            started = harness.sql(
                "SELECT meta FROM event WHERE event_type = 'playbook.started' AND execution_id = ANY(:ids)",
                ids=[r.execution_id for r in runs],
            )
            assert len(started) == 6
            assert all(e.meta["trace"]["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1] for e in started)
            applied = harness.sql(
                "SELECT payload FROM event WHERE event_type = 'subscription.message.directives_applied' "
                "AND execution_id = ANY(:ids)",
                ids=[r.execution_id for r in runs],
            )
            assert len(applied) == 2

            harness.api.post(f"/api/subscriptions/{sid}/pause").raise_for_error()
            assert wait_until(lambda: harness.status()["phase"] == "paused", timeout=30)
            assert harness.status()["pulling"] is False
            late = harness.publish({"n": 6})
            harness.api.post(f"/api/subscriptions/{sid}/resume").raise_for_error()
            assert wait_until(lambda: late in harness.message_ids(), timeout=60)

            # SIGTERM is this instance leaving (a scale-in, a roll-out): the subscription stays active.
            assert harness.signal(signal.SIGTERM) == 0
            assert harness.trail(sid) == [
                "subscription.registered",
                "subscription.activated",
                "subscription.paused",
                "subscription.resumed",
            ]
            assert harness.state(sid) == "active"
        finally:
            harness.close()


def test_batch_dispatch_makes_twelve_executions_through_the_batch_endpoint(plane: Harness) -> None:
    plane.register(dispatch={"batch_dispatch": True, "batch_max": 5})
    ids = plane.publish_many(12)
    plane.start()
    assert wait_until(lambda: len(plane.executions()) >= 12, timeout=60)
    assert sorted(plane.message_ids()) == sorted(ids)
    assert plane.metric('noetl_runtime_dispatch_calls_total{mode="batch"}') >= 3
    assert plane.metric('noetl_runtime_dispatch_calls_total{mode="single"}') == 0


def test_dedup_collapses_a_repeated_idempotency_key_into_one_execution(plane: Harness) -> None:
    plane.register(dedup={"enabled": True, "window_secs": 600})
    plane.start()
    for key in ("K1", "K1", "K2"):
        plane.publish({"key": key}, **{"x-idempotency-key": key})
    sid = plane.subscription_id()

    def deduplicated() -> list[Any]:
        return [
            e
            for e in plane.events("subscription.message.deduplicated")
            if e.stream_id.startswith(f"subscription/{sid}/")
        ]

    assert wait_until(lambda: len(deduplicated()) == 1, timeout=60)
    assert wait_until(lambda: plane.metric("noetl_runtime_acked_total") >= 3, timeout=30)
    assert len(plane.executions()) == 2
    assert deduplicated()[0].payload["dedup_key"] == "K1"


def test_the_rate_governor_limits_records_rate_limited_and_still_runs_every_message(plane: Harness) -> None:
    plane.register(limits={"max_dispatch_per_sec": 2})
    ids = plane.publish_many(10)
    plane.start()
    sid = plane.subscription_id()
    assert wait_until(lambda: len(plane.executions()) >= 10, timeout=60)
    assert sorted(plane.message_ids()) == sorted(ids)  # exactly ten: one execution per message
    assert plane.metric("noetl_runtime_rate_limited_total") >= 1
    # The runtime posts the event to the control plane (POST /api/internal/subscriptions/{id}/events).
    assert wait_until(lambda: len(plane.events("subscription.rate_limited")) >= 1, timeout=10)
    events = plane.events("subscription.rate_limited")
    assert {e.stream_id for e in events} == {f"subscription/{sid}/runtime"}
    assert all(e.payload["path"] == plane.path and e.payload["max_dispatch_per_sec"] == 2 for e in events)
    assert len(events) == plane.metric("noetl_runtime_rate_limited_total")  # one per limiting episode


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup-on", "dedup-off"])
def test_a_runtime_killed_with_messages_in_flight_loses_none_after_restart(plane: Harness, dedup: bool) -> None:
    # At most 50 dispatches a second: the 300 take 6 s or more, so the kill (after 30) lands mid-stream.
    plane.register(dedup={"enabled": dedup}, runtime={"max_in_flight": 50}, limits={"max_dispatch_per_sec": 50})
    ids = plane.publish_many(300)
    # The shortest lease extension: the killed instance's messages come back soonest.
    plane.start(NOETL_RUNTIME_LEASE_EXTENSION_S="10")
    assert wait_until(lambda: len(plane.executions()) >= 30, timeout=60)
    plane.signal(signal.SIGKILL)  # mid-stream: dispatched-not-acked and leased messages die with it
    killed_at = len(plane.executions())
    assert killed_at < 300, "every message was dispatched before the kill: the test proves nothing"
    plane.start(NOETL_RUNTIME_LEASE_EXTENSION_S="10")
    # The emulator gives a dead stream's leases back within about a minute (docs/runtime.md).
    assert wait_until(lambda: set(plane.message_ids()) >= set(ids), timeout=120, interval=0.3), (
        killed_at,
        len(set(plane.message_ids())),
        plane.metric("noetl_runtime_received_total"),
        plane.metric("noetl_runtime_acked_total"),
        plane.metric("noetl_runtime_nacked_total"),
        plane.status()["source"],
    )
    seen = plane.message_ids()
    if dedup:
        assert sorted(seen) == sorted(ids)  # exactly one execution each
    else:
        assert set(seen) == set(ids)  # at least one each


def test_sigterm_to_one_of_two_runtimes_loses_nothing_and_the_other_keeps_pulling(plane: Harness) -> None:
    """Two instances of one subscription, as Cloud Run runs them past ``max_instances = 1``: SIGTERM to
    one drains its own messages; the other keeps pulling, the subscription stays active, and the
    restarted instance rejoins the same registration (its dedup window)."""
    # Each instance dispatches at most 20 messages a second: the 200 take 5 s or more between the two,
    # so the SIGTERM (after 40) lands mid-stream however fast the control plane answers.
    plane.register(
        dedup={"enabled": True, "window_secs": 600},
        runtime={"max_in_flight": 20},
        limits={"max_dispatch_per_sec": 20},
    )
    plane.start(NOETL_RUNTIME_LEASE_EXTENSION_S="10")
    other_port = free_port()
    other = plane.launch(other_port, NOETL_RUNTIME_LEASE_EXTENSION_S="10")
    try:
        sid = plane.subscription_id()
        assert plane.status(other_port)["subscription_id"] == sid
        ids = plane.publish_many(200)
        assert wait_until(lambda: len(plane.executions()) >= 40, timeout=60)
        # Counted as the signal goes out: while the stopped instance drains, the survivor keeps taking
        # the rest, and a count after the drain may already be all of them.
        ran_before = len(set(plane.message_ids()))
        assert plane.signal(signal.SIGTERM) == 0
        assert ran_before < 200, "every message ran before the SIGTERM: the test proves nothing"
        assert plane.status(other_port)["phase"] == "pulling"
        assert plane.state(sid) == "active"
        ids += plane.publish_many(100)  # only the survivor can take these
        assert wait_until(lambda: set(plane.message_ids()) >= set(ids), timeout=120, interval=0.3), (
            len(set(plane.message_ids())),
            plane.status(other_port),
        )
        assert sorted(plane.message_ids()) == sorted(ids)  # nothing lost, nothing run twice
        assert plane.state(sid) == "active"
        assert plane.trail(sid) == ["subscription.registered", "subscription.activated"]
        plane.start(NOETL_RUNTIME_LEASE_EXTENSION_S="10")  # the restarted instance
        assert plane.subscription_id() == sid
    finally:
        stop_group(other.pid)
        other.wait()
