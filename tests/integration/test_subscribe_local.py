"""``noetl-cloud subscribe FILE --local`` against the Pub/Sub emulator: each message runs its playbook
in-process and the lifecycle, the runs and the applied directives land in the JSONL events file."""

from __future__ import annotations

import collections
import json
import secrets
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from noetl_cloud.cli import main
from tests.integration.control_fixtures import PROJECT
from tests.playbooks import INGEST

PLAYBOOK = INGEST


def test_subscribe_local_runs_each_message_and_writes_the_event_trail(
    tmp_path: Path, local_env: dict[str, str]
) -> None:
    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "ingest.yaml").write_text(PLAYBOOK)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    name = f"local-{secrets.token_hex(4)}"
    topic, pull = publisher.topic_path(PROJECT, name), subscriber.subscription_path(PROJECT, name)
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=pull, topic=topic)
    try:
        for n in range(3):
            attrs = {"x-noetl-route": "domain/ingest"} if n == 0 else {}
            publisher.publish(topic, json.dumps({"n": n}).encode(), **attrs).result(timeout=30)
        (tmp_path / "sub.yaml").write_text(
            "apiVersion: noetl.io/v1\nkind: Subscription\n"
            "metadata: {name: local-demo, path: subscriptions/local-demo}\n"
            f"spec:\n  source: pubsub\n  mode: pull\n  subscription: {pull}\n"
            "  dispatch: {playbook: domain/ingest}\n"
            "  headers: {directives: [{header: x-noetl-route, controls: dispatch.playbook,"
            " allowed: [domain/ingest]}]}\n"
        )
        trail = tmp_path / "trail.jsonl"
        args = ["subscribe", str(tmp_path / "sub.yaml"), "--local", "--events", str(trail), "--max-messages", "3"]
        assert main([*args, "--duration", "60"]) == 0
    finally:
        subscriber.delete_subscription(subscription=pull)
        publisher.delete_topic(topic=topic)
        subscriber.close()
    types = collections.Counter(json.loads(line)["event_type"] for line in trail.read_text().splitlines())
    assert types["playbook.completed"] == 3
    assert types["subscription.message.directives_applied"] == 1
    lifecycle = [
        t
        for t in (json.loads(x)["event_type"] for x in trail.read_text().splitlines())
        if t
        in ("subscription.registered", "subscription.activated", "subscription.draining", "subscription.deactivated")
    ]
    assert lifecycle == [
        "subscription.registered",
        "subscription.activated",
        "subscription.draining",
        "subscription.deactivated",
    ]


def test_subscribe_local_runs_kafka_records_with_their_headers_as_directives(
    tmp_path: Path, kafka_servers: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration.kafka_fixtures import produce

    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "ingest.yaml").write_text(PLAYBOOK)
    records = [
        (json.dumps({"n": n}).encode(), [("x-noetl-route", b"domain/ingest")] if n == 0 else []) for n in range(3)
    ]
    produce(kafka_servers, kafka_topic, records)
    (tmp_path / "sub.yaml").write_text(
        "apiVersion: noetl.io/v1\nkind: Subscription\n"
        "metadata: {name: local-kafka, path: subscriptions/local-kafka}\n"
        f"spec:\n  source: kafka\n  mode: pull\n  topic: {kafka_topic}\n  group: g-{secrets.token_hex(4)}\n"
        "  dispatch: {playbook: domain/ingest}\n"
        "  headers: {directives: [{header: x-noetl-route, controls: dispatch.playbook,"
        " allowed: [domain/ingest]}]}\n"
    )
    monkeypatch.setenv("NOETL_KAFKA_BOOTSTRAP_SERVERS", kafka_servers)
    trail = tmp_path / "trail.jsonl"
    args = ["subscribe", str(tmp_path / "sub.yaml"), "--local", "--events", str(trail), "--max-messages", "3"]
    assert main([*args, "--duration", "120"]) == 0
    types = collections.Counter(json.loads(line)["event_type"] for line in trail.read_text().splitlines())
    assert types["playbook.completed"] == 3
    assert types["subscription.message.directives_applied"] == 1
