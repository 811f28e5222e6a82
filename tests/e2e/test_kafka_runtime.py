"""The subscription runtime (Mode B) on a Kafka topic: the local stack's Kafka broker (``local up
--with kafka``), the real execute role and PostgreSQL. Two instances share the topic's partitions
through their consumer group; a SIGTERM to one hands its partitions to the other."""

from __future__ import annotations

import json
import secrets
import signal
from typing import Any

import pytest
import yaml

from noetl_cloud.local.process import stop_group, wait_until
from tests.e2e.roles import free_port
from tests.e2e.test_subscription_runtime import TRACEPARENT, Harness, control_plane, plane  # noqa: F401
from tests.integration.kafka_fixtures import JOIN_S, committed, produce

pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")


def register(harness: Harness, topic: str, group: str) -> None:
    spec: dict[str, Any] = {
        "source": "kafka",
        "mode": "pull",
        "topic": topic,
        "group": group,
        "runtime": {"max_in_flight": 20},
        "dedup": {"enabled": True, "window_secs": 600},
        "dispatch": {"playbook": "domain/ingest", "payload_from": "message.json"},
        "headers": {
            "directives": [{"header": "x-noetl-route", "controls": "dispatch.playbook", "allowed": ["domain/fraud"]}],
            "trace": {"propagate": "w3c"},
        },
    }
    doc = {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": harness.name, "path": harness.path},
        "spec": spec,
    }
    harness.api.post("/api/catalog", json={"content": yaml.safe_dump(doc)}).raise_for_error()


def records(first: int, count: int) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    out = []
    for n in range(first, first + count):
        headers = [("traceparent", TRACEPARENT.encode())]
        if n % 10 == 0:
            headers.append(("X-Noetl-Route", b"domain/fraud"))
        out.append((json.dumps({"n": n}).encode(), headers))
    return out


def test_two_runtimes_on_a_kafka_topic_run_every_record_once_with_header_directives_through_a_sigterm(
    plane: Harness,  # noqa: F811
    kafka_servers: str,
    kafka_topic: str,
) -> None:
    group = f"noetl-{secrets.token_hex(4)}"
    register(plane, kafka_topic, group)
    env = {"NOETL_KAFKA_BOOTSTRAP_SERVERS": kafka_servers}
    plane.start(**env)
    other_port = free_port()
    other = plane.launch(other_port, **env)
    try:
        sid = plane.subscription_id()
        produce(kafka_servers, kafka_topic, records(0, 60))
        assert wait_until(lambda: len(plane.executions()) >= 20, timeout=JOIN_S)
        assert plane.signal(signal.SIGTERM) == 0
        produce(kafka_servers, kafka_topic, records(60, 40))  # only the survivor can take these
        assert wait_until(lambda: len(set(plane.message_ids())) >= 100, timeout=JOIN_S, interval=0.3), (
            len(set(plane.message_ids())),
            _gaps(plane.message_ids()),
            json.dumps(plane.status(other_port)),
        )
        runs = plane.executions()
        assert len(runs) == 100  # nothing lost, nothing run twice (the dedup window of the one registration)
        assert all(r.meta["message_id"].startswith(f"{kafka_topic}/") for r in runs)
        assert sum(r.path == "domain/fraud" for r in runs) == 10  # x-noetl-route, allowlisted, on 0, 10, ..., 90
        assert all(r.trace["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1] for r in runs)
        assert plane.state(sid) == "active"
        assert wait_until(lambda: committed(kafka_servers, kafka_topic, group) == 100, timeout=30)
    finally:
        stop_group(other.pid)
        other.wait()


def _gaps(message_ids: list[str]) -> dict[str, list[int]]:
    """Per partition, the offsets below its highest one that no execution carries (``topic/partition/offset``)."""
    seen: dict[str, set[int]] = {}
    for message_id in message_ids:
        _topic, partition, offset = message_id.rsplit("/", 2)
        seen.setdefault(partition, set()).add(int(offset))
    return {p: sorted(set(range(max(offsets) + 1)) - offsets) for p, offsets in seen.items()}
