"""The Kafka source's bookkeeping (runtime/kafka.py) against a scripted consumer: which offset is
committed when records are acked out of order, what a revoked partition commits and forgets, and
the pause at ``max_in_flight``. The broker itself is tested in tests/integration/test_kafka_source.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from noetl_cloud.local.process import wait_until
from noetl_cloud.runtime.kafka import KafkaSource
from noetl_cloud.runtime.port import Received

pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")
TOPIC = "clicks"


class Record:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b'{"n": %d}' % self._offset

    def key(self) -> bytes | None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return [("x-tag", b"a"), ("x-tag", b"b")]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def error(self) -> None:
        return None


class Consumer:
    """One partition of ``count`` records, handed out in order while not paused."""

    def __init__(self, count: int) -> None:
        self.records = [Record(0, n) for n in range(count)]
        self.position = 0
        self.paused = False
        self.commits: list[dict[int, int]] = []
        self.rewinds: list[int] = []
        self.lock = threading.Lock()
        self.on_assign: Any = None
        self.on_revoke: Any = None
        self.prefetched = False  # hand one record out even while paused (fetched before the pause)
        self.assigned = True  # false between a rebalance's revoke and its assign

    def subscribe(self, _topics: list[str], on_assign: Any, on_revoke: Any) -> None:
        self.on_assign, self.on_revoke = on_assign, on_revoke
        on_assign(self, [object()])

    def assignment(self) -> list[str]:
        return ["p0"] if self.assigned else []

    def pause(self, _partitions: list[str]) -> None:
        self.paused = True

    def resume(self, partitions: list[Any]) -> None:
        if partitions:  # resuming nothing (mid-rebalance) leaves the partition paused
            self.paused = False

    def consume(self, num_messages: int, timeout: float) -> list[Record]:
        with self.lock:
            if self.prefetched:  # one record fetched before the pause
                self.prefetched = False
                count = 1
            elif self.paused:
                count = 0
            else:
                count = num_messages
            out = self.records[self.position : self.position + count]
            self.position += len(out)
        if not out:
            threading.Event().wait(min(timeout, 0.01))
        return out

    def seek(self, tp: Any) -> None:
        with self.lock:
            self.rewinds.append(tp.offset)
            self.position = tp.offset

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        with self.lock:
            self.commits.append({tp.partition: tp.offset for tp in offsets})

    def close(self) -> None:
        pass

    def last_commit(self) -> int | None:
        with self.lock:
            return self.commits[-1][0] if self.commits else None


def started(count: int, max_in_flight: int) -> tuple[KafkaSource, Consumer, list[Received]]:
    consumer = Consumer(count)
    source = KafkaSource("broker:9092", topic=TOPIC, group="g", consumer_factory=lambda _config: consumer)
    held: list[Received] = []
    source.start(held.append, max_in_flight=max_in_flight)
    return source, consumer, held


def test_records_become_messages_with_a_stable_id_headers_and_publish_time() -> None:
    source, _consumer, held = started(1, 10)
    try:
        assert wait_until(lambda: len(held) == 1, timeout=5, interval=0.01)
        message = held[0].message
        assert message.message_id == "clicks/0/0" and held[0].ack_id == "clicks/0/0"
        assert message.header_pairs == (("x-tag", "a"), ("x-tag", "b"))
        assert message.publish_time is not None and message.publish_time.startswith("2023-11-14")
    finally:
        source.close()


def test_the_commit_stops_at_the_first_offset_still_held() -> None:
    source, consumer, held = started(4, 10)
    try:
        assert wait_until(lambda: len(held) == 4, timeout=5, interval=0.01)
        held[0].ack()
        held[2].ack()
        assert wait_until(lambda: consumer.last_commit() == 1, timeout=5, interval=0.01)
        held[1].ack()
        assert wait_until(lambda: consumer.last_commit() == 3, timeout=5, interval=0.01)
    finally:
        source.close()
    assert consumer.last_commit() == 3  # offset 3 was never acked: the next member starts there


def test_a_revoked_partition_commits_what_is_done_and_later_settlements_commit_nothing() -> None:
    source, consumer, held = started(3, 10)
    try:
        assert wait_until(lambda: len(held) == 3, timeout=5, interval=0.01)
        held[0].ack()
        consumer.on_revoke(consumer, [type("TP", (), {"topic": TOPIC, "partition": 0})()])
        assert consumer.last_commit() == 1
        held[1].nack()  # the next owner delivers it: not handed again here
        held[2].ack()
        assert source.stats()["retrying"] == 0 and source.stats()["in_flight"] == 0
        commits = len(consumer.commits)
    finally:
        source.close()
    assert len(consumer.commits) == commits  # nothing of the revoked partition committed after it


def test_at_max_in_flight_the_partition_pauses_and_a_prefetched_record_is_read_again_later() -> None:
    source, consumer, held = started(5, 2)
    try:
        assert wait_until(lambda: len(held) == 2 and consumer.paused, timeout=5, interval=0.01)
        consumer.prefetched = True  # the next consume returns offset 2 although paused
        assert wait_until(lambda: consumer.rewinds == [2], timeout=5, interval=0.01)
        assert len(held) == 2
        held[0].ack()
        assert wait_until(
            lambda: len(held) == 3 and held[2].message.message_id == "clicks/0/2", timeout=5, interval=0.01
        )
    finally:
        source.close()


def test_a_record_waiting_to_be_handed_again_is_dropped_with_its_revoked_partition() -> None:
    source, consumer, held = started(2, 10)
    try:
        assert wait_until(lambda: len(held) == 2, timeout=5, interval=0.01)
        held[0].nack()
        assert source.stats()["retrying"] == 1 and source.stats()["in_flight"] == 2
        consumer.on_revoke(consumer, [type("TP", (), {"topic": TOPIC, "partition": 0})()])
        assert source.stats()["retrying"] == 0 and source.stats()["in_flight"] == 1  # capacity given back
    finally:
        source.close()


def test_a_nacked_record_is_handed_again_with_the_next_attempt() -> None:
    source, consumer, held = started(1, 10)
    try:
        assert wait_until(lambda: len(held) == 1, timeout=5, interval=0.01)
        held[0].nack()
        assert wait_until(lambda: len(held) == 2, timeout=5, interval=0.05)  # after the first backoff (1 s)
        assert held[1].message.message_id == "clicks/0/0" and held[1].message.delivery_attempt == 2
        assert consumer.last_commit() in (None, 0)
    finally:
        source.close()


def test_a_partition_handed_back_by_a_rebalance_is_read_again_though_it_was_paused_at_the_cap() -> None:
    source, consumer, held = started(5, 2)
    try:
        assert wait_until(lambda: len(held) == 2 and consumer.paused, timeout=5, interval=0.01)
        consumer.on_revoke(consumer, [type("TP", (), {"topic": TOPIC, "partition": 0})()])
        consumer.assigned = False
        for delivery in held:  # settled after the revoke: capacity frees while nothing is assigned
            delivery.ack()
        assert wait_until(lambda: source.stats()["paused"] == 0, timeout=5, interval=0.01)
        assert consumer.paused  # its resume found no partition to resume
        consumer.assigned = True
        consumer.on_assign(consumer, [object()])
        assert wait_until(lambda: len(held) >= 3, timeout=5, interval=0.01)  # read again, not stuck paused
    finally:
        source.close()
