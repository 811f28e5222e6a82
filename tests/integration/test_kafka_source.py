"""The Kafka source (runtime/kafka.py) against a real Kafka-protocol broker: tansu, the local stack's
optional component (``noetl-cloud local up --with kafka``; the ``kafka`` extra, which the ``dev``
extra includes). The fixture starts it in the stack's state folder (or reuses the running one) and
stops it if it started it. A consumer group's first join takes the broker several seconds: each
wait below is a condition with a timeout."""

from __future__ import annotations

import json
import secrets
import threading
from typing import Any

import pytest

from noetl_cloud.engine.outcome import ToolCall
from noetl_cloud.local.process import wait_until
from noetl_cloud.runtime.kafka import KafkaSource
from noetl_cloud.runtime.port import Received
from noetl_cloud.tools.subscription import SubscriptionTool
from tests.integration.kafka_fixtures import JOIN_S, committed, produce

confluent_kafka = pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")


class Held:
    """A Mode B callback that holds every delivery until the test settles it."""

    def __init__(self) -> None:
        self.items: list[Received] = []
        self.lock = threading.Lock()

    def __call__(self, delivery: Received) -> None:
        with self.lock:
            self.items.append(delivery)

    def count(self) -> int:
        with self.lock:
            return len(self.items)

    def ids(self) -> list[str]:
        with self.lock:
            return [d.message.message_id for d in self.items]


def test_mode_b_holds_at_most_max_in_flight_and_commits_only_what_was_acked(
    kafka_servers: str, kafka_topic: str
) -> None:
    group = f"g-{secrets.token_hex(4)}"
    produce(
        kafka_servers, kafka_topic, [(json.dumps({"n": n}).encode(), [("x-n", str(n).encode())]) for n in range(20)]
    )
    source, held = KafkaSource(kafka_servers, topic=kafka_topic, group=group), Held()
    source.start(held, max_in_flight=5)
    try:
        assert wait_until(lambda: held.count() == 5 and source.stats()["paused"] == 1, timeout=JOIN_S)
        assert held.count() == 5  # at the cap the partitions are paused: nothing more is handed over
        assert committed(kafka_servers, kafka_topic, group) == 0  # nothing acked, nothing committed
        for delivery in list(held.items):
            delivery.ack()
        assert wait_until(lambda: held.count() >= 10, timeout=30)  # capacity freed: resumed
        assert wait_until(lambda: committed(kafka_servers, kafka_topic, group) >= 5, timeout=30)
        done = 5
        while done < 20:
            assert wait_until(lambda: held.count() > done, timeout=30), held.count()  # noqa: B023
            with held.lock:
                batch = held.items[done:]
            for delivery in batch:
                delivery.ack()
            done += len(batch)
    finally:
        source.close()
    assert sorted(held.ids()) == sorted(set(held.ids())) and len(held.ids()) == 20  # each once
    assert committed(kafka_servers, kafka_topic, group) == 20
    first = held.items[0].message
    assert (
        first.message_id.startswith(f"{kafka_topic}/")
        and ("x-n", str(json.loads(first.data)["n"])) in first.header_pairs
    )


def test_a_nacked_record_comes_back_and_the_commit_stops_before_it(kafka_servers: str, kafka_topic: str) -> None:
    group = f"g-{secrets.token_hex(4)}"
    produce(kafka_servers, kafka_topic, [(json.dumps({"n": n}).encode(), []) for n in range(3)], key=b"one-partition")
    source, held = KafkaSource(kafka_servers, topic=kafka_topic, group=group), Held()
    source.start(held, max_in_flight=10)
    try:
        assert wait_until(lambda: held.count() == 3, timeout=JOIN_S)
        first, *rest = held.items
        first.nack()
        for delivery in rest:
            delivery.ack()
        assert wait_until(lambda: held.count() == 4, timeout=30)  # handed again after the backoff
        again = held.items[3]
        assert again.message.message_id == first.message.message_id and again.message.delivery_attempt == 2
        assert committed(kafka_servers, kafka_topic, group) == 0  # the two acked after it wait for it
        again.ack()
        assert wait_until(lambda: committed(kafka_servers, kafka_topic, group) == 3, timeout=30)
    finally:
        source.close()


def test_records_held_when_an_instance_leaves_go_to_the_next_member_of_the_group(
    kafka_servers: str, kafka_topic: str
) -> None:
    group = f"g-{secrets.token_hex(4)}"
    produce(kafka_servers, kafka_topic, [(json.dumps({"n": n}).encode(), []) for n in range(10)], key=b"one-partition")
    leaving, held = KafkaSource(kafka_servers, topic=kafka_topic, group=group), Held()
    leaving.start(held, max_in_flight=10)
    assert wait_until(lambda: held.count() == 10, timeout=JOIN_S)
    for delivery in held.items[:4]:
        delivery.ack()
    leaving.close()  # six still held: not committed
    assert committed(kafka_servers, kafka_topic, group) == 4
    joining, taken = KafkaSource(kafka_servers, topic=kafka_topic, group=group), Held()
    joining.start(taken, max_in_flight=10)
    try:
        assert wait_until(lambda: taken.count() == 6, timeout=JOIN_S)
        assert sorted(taken.ids()) == sorted(held.ids()[4:])
    finally:
        joining.close()


def call(**config: Any) -> ToolCall:
    return ToolCall(kind="subscription", config=config, spec={}, execution_id="1", step="drain", task="t", attempt=1)


def test_the_tool_polls_kafka_with_headers_as_directives_and_commits_on_success(
    kafka_servers: str, kafka_topic: str
) -> None:
    group = f"g-{secrets.token_hex(4)}"
    records = [
        (
            json.dumps({"n": n}).encode(),
            [("X-Noetl-Route", b"domain/fraud")] if n < 2 else [("x-tag", b"a"), ("x-tag", b"b")],
        )
        for n in range(5)
    ]
    produce(kafka_servers, kafka_topic, records)
    route = {"header": "x-noetl-route", "controls": "dispatch.playbook", "allowed": ["domain/fraud"]}
    task = {"source": "kafka", "topic": kafka_topic, "group": group, "bootstrap_servers": kafka_servers, "batch": 10}
    tool = SubscriptionTool()
    messages: list[dict[str, Any]] = []

    def drained() -> bool:
        outcome = tool.run(call(**task, timeout_ms=2000, headers={"directives": [route]}))
        assert outcome.status == "ok", outcome
        messages.extend(outcome.result["messages"])
        return len(messages) >= 5

    try:
        assert wait_until(drained, timeout=JOIN_S, interval=0)
    finally:
        tool.close()
    assert sorted(m["payload"]["n"] for m in messages) == [0, 1, 2, 3, 4]
    routed = [m for m in messages if m["directives"]["playbook"] == "domain/fraud"]
    assert len(routed) == 2 and all(m["headers"]["x-noetl-route"] == "domain/fraud" for m in routed)
    assert all(m["headers"]["x-tag"] == ["a", "b"] for m in messages if "x-tag" in m["headers"])
    assert committed(kafka_servers, kafka_topic, group) == 5  # a new consumer of the group starts after them


def test_the_tool_releases_a_batch_with_an_undecodable_record_and_returns_it_again(
    kafka_servers: str, kafka_topic: str
) -> None:
    group = f"g-{secrets.token_hex(4)}"
    produce(kafka_servers, kafka_topic, [(b"not json", []), (b'{"n": 1}', [])], key=b"one-partition")
    task = {"source": "kafka", "topic": kafka_topic, "group": group, "bootstrap_servers": kafka_servers, "batch": 10}
    tool = SubscriptionTool()
    try:
        outcomes = []

        def polled() -> bool:
            outcome = tool.run(call(**task, timeout_ms=2000))
            if outcome.result.get("failed"):
                outcomes.append(outcome)
            return len(outcomes) == 2  # the released batch came back on the next poll

        assert wait_until(polled, timeout=JOIN_S, interval=0)
        assert all(o.status == "error" and o.result["acked"] is False for o in outcomes)
    finally:
        tool.close()
    assert committed(kafka_servers, kafka_topic, group) == 0
