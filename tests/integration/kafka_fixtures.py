"""The local stack's Kafka broker (``noetl-cloud local up --with kafka``) for the tests that need
one: the fixture starts it in the stack's state folder (or reuses the running one) and stops it if it
started it, and helpers to make topics, produce records and read a group's committed offsets."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_cloud.local.kafka_broker import KafkaBroker
from noetl_cloud.local.layout import DEFAULT_PORT_BASE, default_state_dir
from tests import parallel

ROOT = Path(__file__).resolve().parents[2]
JOIN_S = 120.0  # the first join of a consumer group (and a rebalance), on a loaded machine


@pytest.fixture(scope="session")
def kafka_servers(request: pytest.FixtureRequest) -> Iterator[str]:
    base = int(os.environ.get("NOETL_LOCAL_PORT_BASE") or DEFAULT_PORT_BASE)
    state_dir = default_state_dir(os.environ, ROOT)
    broker = KafkaBroker(state_dir, base)
    with parallel.exclusive(state_dir, "kafka"):  # one xdist worker at a time starts (or finds) it
        running = broker.status()[1]
        env = broker.up(echo=lambda _line: None)
    if not running:
        parallel.started_here(request.config, "kafka")
    yield env["NOETL_KAFKA_BOOTSTRAP_SERVERS"]
    if not running and parallel.owns_teardown(request.config) and not os.environ.get("NOETL_LOCAL_KEEP"):
        broker.down(echo=lambda _line: None)


@pytest.fixture
def kafka_topic(kafka_servers: str) -> str:
    """A new topic of two partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"t-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": kafka_servers})
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(30)
    return name


def produce(
    servers: str, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]], key: bytes | None = None
) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": servers})
    for value, headers in records:
        producer.produce(topic, value=value, headers=headers, key=key)
    assert producer.flush(30) == 0


def committed(servers: str, topic: str, group: str) -> int:
    """The group's committed offsets on the topic, summed over its two partitions."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        parts = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=30)
        return sum(max(tp.offset, 0) for tp in parts)
    finally:
        consumer.close()
