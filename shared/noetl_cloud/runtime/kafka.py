"""Kafka as a :class:`~noetl_cloud.runtime.port.SourceClient` (the ``kafka`` extra: confluent-kafka).

One consumer of the group ``group`` on ``topic``; the group spreads the topic's partitions over the
runtime's instances and moves them when one leaves. Offsets are committed by this client only
(``enable.auto.commit`` off) and only for what the runtime is done with: a partition's committed
offset is the first offset it still holds (or the next after the last one handed over), so a
message is never committed before the runtime acked it, i.e. after its dispatch or its spool.

**Flow control (Mode B).** One poll thread hands every record to the runtime at once; while it
holds ``max_in_flight`` records it pauses its partitions (the group keeps them; the broker keeps
the backlog) and resumes them when a record is settled. Acks are counted under a lock and
committed from the poll thread every ``COMMIT_EVERY_S`` (0.5 s), and synchronously when partitions
are revoked and at :meth:`close`: a crash loses at most that half second of commits, whose records
are delivered again (at least once).

**Nack.** Kafka cannot nack one record. A nacked record stays uncommitted (its partition's commit
stops before it) and is handed to the runtime again after a backoff (1 s, doubling to 60 s), with
``delivery_attempt`` counting. A record held when its partition is revoked (another instance took
it) is not committed here: the new owner receives it again (the dedup window collapses the second
dispatch). So every record is dispatched at least once.

**Records as messages.** ``message_id`` is ``<topic>/<partition>/<offset>`` (stable across
redeliveries, so the dedup window recognizes them); the record headers are the metadata channel
(RFC §7.1: UTF-8 decoded, a repeated key kept in order); the key is the ordering key; the record's
timestamp is the publish time.

**Mode A.** :meth:`fetch` consumes at most ``max_messages`` records within the timeout;
:meth:`acknowledge` commits them (synchronously: the tool reports them acked), :meth:`release`
seeks each partition back to the first released offset, so the next fetch returns them again.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from noetl_cloud.errors import ConfigError, Unavailable
from noetl_cloud.runtime.port import Received, SourceMessage

log = logging.getLogger(__name__)

POLL_S = 0.2
BATCH = 500  # records per consume call, at most the free capacity
COMMIT_EVERY_S = 0.5  # acked offsets are committed this often (and at revoke and close)
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0
TopicPartition = tuple[str, int]


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def _key(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii")


def source_message(record: Any) -> SourceMessage:
    """A Kafka record as the runtime sees every source's message."""
    _kind, millis = record.timestamp()
    published = datetime.fromtimestamp(millis / 1000, UTC).isoformat() if millis and millis > 0 else None
    return SourceMessage(
        message_id=f"{record.topic()}/{record.partition()}/{record.offset()}",
        data=bytes(record.value() or b""),
        header_pairs=tuple((str(k), _text(v)) for k, v in (record.headers() or [])),
        publish_time=published,
        ordering_key=_key(record.key()),
        delivery_attempt=1,
    )


class _Delivery:
    __slots__ = ("_source", "ack_id", "generation", "message", "offset", "partition", "streamed")

    def __init__(
        self, source: KafkaSource, message: SourceMessage, partition: TopicPartition, offset: int, *, streamed: bool
    ) -> None:
        self._source = source
        self.message = message
        self.partition = partition
        self.offset = offset
        self.streamed = streamed  # Mode B: counts against max_in_flight; a nack redelivers it here
        self.generation = source._generation
        self.ack_id: str | None = f"{partition[0]}/{partition[1]}/{offset}"

    def ack(self) -> None:
        self._source._settle(self, done=True)

    def nack(self) -> None:
        self._source._settle(self, done=False)


class KafkaSource:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str,
        group: str,
        config: dict[str, Any] | None = None,
        consumer_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.group = group
        self.config = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            **(config or {}),
        }
        self._consumer_factory = consumer_factory
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._held: dict[TopicPartition, set[int]] = {}  # offsets handed over and not yet acked
        self._next: dict[TopicPartition, int] = {}  # the offset after the last one handed over
        self._committed: dict[TopicPartition, int] = {}
        self._retry: list[tuple[float, _Delivery]] = []  # nacked records and when to hand them again
        self._in_flight = 0
        self._generation = 0  # bumped on every rebalance: older deliveries commit nothing
        self._paused = False
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self.polled = 0

    # -- the consumer --------------------------------------------------------------------------

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            factory = self._consumer_factory or _confluent_consumer
            try:
                self._consumer = factory(self.config)
                self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - confluent-kafka raises KafkaException and others
                self._consumer = None
                raise Unavailable(
                    f"Kafka at {self.bootstrap_servers} not reached: {type(exc).__name__}", code="source_unavailable"
                ) from None
        return self._consumer

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        """New partitions start unpaused: a pause taken before the rebalance (at the cap) must not stay on a
        partition handed back to this consumer, while the flag says nothing is paused (the partition would
        never be read again); the next poll pauses them again if the cap is still reached."""
        consumer.resume(partitions)
        with self._lock:
            self._generation += 1
            self._paused = False
        log.info("kafka partitions assigned", extra={"topic": self.topic, "partitions": len(partitions)})

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        """Commit what is done in the partitions leaving this consumer, then forget them: a record
        still held there is the next owner's to deliver again."""
        self._commit(consumer, asynchronous=False)
        with self._lock:
            self._generation += 1
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._held.pop(key, None)
                self._next.pop(key, None)
                self._committed.pop(key, None)
            gone = {(tp.topic, tp.partition) for tp in partitions}
            kept = [(at, d) for at, d in self._retry if d.partition not in gone]
            self._in_flight -= len(self._retry) - len(kept)  # dropped: the next owner delivers them
            self._retry = kept
        log.info("kafka partitions revoked", extra={"topic": self.topic, "partitions": len(partitions)})

    # -- bookkeeping -----------------------------------------------------------------------------

    def _track(self, record: Any, *, streamed: bool) -> _Delivery:
        partition, offset = (record.topic(), record.partition()), int(record.offset())
        with self._lock:
            self._held.setdefault(partition, set()).add(offset)
            self._next[partition] = max(self._next.get(partition, 0), offset + 1)
            if streamed:
                self._in_flight += 1
            self.polled += 1
        return _Delivery(self, source_message(record), partition, offset, streamed=streamed)

    def _settle(self, delivery: _Delivery, *, done: bool) -> None:
        with self._lock:
            stale = delivery.generation != self._generation  # its partition was revoked meanwhile
            if delivery.streamed and not done and not stale:  # handed again later: still held
                attempt = (delivery.message.delivery_attempt or 1) + 1
                delay = min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (attempt - 2))
                message = replace(delivery.message, delivery_attempt=attempt)
                again = _Delivery(self, message, delivery.partition, delivery.offset, streamed=True)
                self._retry.append((time.monotonic() + delay, again))
                return
            if delivery.streamed:
                self._in_flight -= 1
            if done and not stale:
                self._held.get(delivery.partition, set()).discard(delivery.offset)

    def _committable(self, *, every: bool) -> dict[TopicPartition, int]:
        """Per partition, the offset to commit: the first one still held, else the next after the
        last handed over; only those past the last commit unless ``every``."""
        with self._lock:
            out = {}
            for partition, next_offset in self._next.items():
                held = self._held.get(partition)
                offset = min(held) if held else next_offset
                if every or offset > self._committed.get(partition, -1):
                    out[partition] = offset
            return out

    def _commit(self, consumer: Any, *, asynchronous: bool) -> None:
        """Commit what is done; a synchronous commit (revoke, close, Mode A ack) repeats every
        partition's offset, in case an asynchronous one was lost."""
        offsets = self._committable(every=not asynchronous)
        if not offsets:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        try:
            consumer.commit(
                offsets=[KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=asynchronous
            )
        except KafkaException as exc:
            log.warning("kafka commit failed; retried with the next one", extra={"error": str(exc)})
            return
        with self._lock:
            for partition, offset in offsets.items():
                if offset > self._committed.get(partition, -1):
                    self._committed[partition] = offset

    # -- continuous (Mode B) -------------------------------------------------------------------

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        if self._running.is_set():
            return
        consumer = self.consumer
        self._running.set()
        self._thread = threading.Thread(
            target=self._loop, args=(consumer, on_message, max_in_flight), name="kafka-poll", daemon=True
        )
        self._thread.start()

    def _loop(self, consumer: Any, on_message: Callable[[Received], None], max_in_flight: int) -> None:
        last_commit = time.monotonic()
        while self._running.is_set():
            self._flow(consumer, max_in_flight)
            for delivery in self._due():
                on_message(delivery)
            with self._lock:
                free = max(1, max_in_flight - self._in_flight)  # at the cap: paused, still serving the group
            try:
                records = consumer.consume(num_messages=min(free, BATCH), timeout=POLL_S)
            except Exception as exc:  # noqa: BLE001 - a broken client: log, wait, poll again
                log.warning("kafka poll failed: %s", type(exc).__name__)
                self._running.wait(1.0)
                continue
            rewound: set[TopicPartition] = set()
            for record in records:
                if record.error() is not None:
                    log.warning("kafka poll: %s", record.error())
                    continue
                partition = (record.topic(), record.partition())
                if partition in rewound:
                    continue  # the seek reads it again
                with self._lock:
                    full = self._in_flight >= max_in_flight
                if full:  # fetched before the pause took hold: read it again after the resume
                    self._rewind(consumer, record)
                    rewound.add(partition)
                else:
                    on_message(self._track(record, streamed=True))
            if time.monotonic() - last_commit >= COMMIT_EVERY_S:
                self._commit(consumer, asynchronous=True)
                last_commit = time.monotonic()

    def _rewind(self, consumer: Any, record: Any) -> None:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        try:
            consumer.seek(KafkaTopicPartition(record.topic(), record.partition(), record.offset()))
        except Exception as exc:  # noqa: BLE001 - not assigned any more: the next owner reads it
            log.warning("kafka seek failed: %s", type(exc).__name__)

    def _flow(self, consumer: Any, max_in_flight: int) -> None:
        """Pause the assigned partitions at the cap, resume them below it."""
        with self._lock:
            full = self._in_flight >= max_in_flight
            change = full != self._paused
            self._paused = full
        if not change:
            return
        assignment = consumer.assignment()
        if full:
            consumer.pause(assignment)
        else:
            consumer.resume(assignment)

    def _due(self) -> list[_Delivery]:
        now = time.monotonic()
        with self._lock:
            due = [d for at, d in self._retry if at <= now]
            self._retry = [(at, d) for at, d in self._retry if at > now]
        return due

    def stats(self) -> dict[str, int]:
        """What this source holds and has polled (for ``/status``)."""
        with self._lock:
            return {
                "in_flight": self._in_flight,
                "retrying": len(self._retry),
                "polled": self.polled,
                "paused": int(self._paused),
            }

    def stop(self, timeout_s: float = 5.0) -> None:
        self._running.clear()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
        with self._lock:
            retrying, self._retry = self._retry, []
            self._in_flight -= len(retrying)  # nacked and never handed again: the group redelivers them

    # -- bounded (Mode A) ----------------------------------------------------------------------

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        consumer = self.consumer
        deadline = time.monotonic() + timeout_s
        out: list[Received] = []
        while len(out) < max_messages:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                records = consumer.consume(num_messages=max_messages - len(out), timeout=left)
            except Exception as exc:  # noqa: BLE001 - confluent-kafka's own hierarchy
                raise Unavailable(
                    f"poll of {self.topic} failed: {type(exc).__name__}", code="source_unavailable"
                ) from None
            out.extend(self._track(r, streamed=False) for r in records if r.error() is None)
            if out:
                break  # a bounded drain returns what arrived, as a Pub/Sub pull does
        return out

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        with self._lock:
            for partition, offset in _parse(ack_ids):
                self._held.get(partition, set()).discard(offset)
        self._commit(self.consumer, asynchronous=False)

    def release(self, ack_ids: Sequence[str]) -> None:
        """Seek each partition back to its first released offset: the next fetch returns them."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        first: dict[TopicPartition, int] = {}
        for partition, offset in _parse(ack_ids):
            first[partition] = min(offset, first.get(partition, offset))
        with self._lock:
            for partition, offset in first.items():
                held = self._held.get(partition, set())
                self._held[partition] = {o for o in held if o < offset}
                self._next[partition] = offset
        for (topic, number), offset in first.items():
            try:
                self.consumer.seek(KafkaTopicPartition(topic, number, offset))
            except Exception as exc:  # noqa: BLE001 - not assigned any more: the group redelivers
                log.warning("kafka seek failed (%s); the group redelivers from the last commit", type(exc).__name__)

    def close(self) -> None:
        """Stop, commit what is done, and leave the group (its partitions go to the other instances)."""
        self.stop()
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            self._commit(consumer, asynchronous=False)
        finally:
            consumer.close()


def _parse(ack_ids: Sequence[str]) -> list[tuple[TopicPartition, int]]:
    out = []
    for ack_id in ack_ids:
        topic, partition, offset = ack_id.rsplit("/", 2)
        out.append(((topic, int(partition)), int(offset)))
    return out


def _confluent_consumer(config: dict[str, Any]) -> Any:
    try:
        from confluent_kafka import Consumer
    except ImportError:
        raise ConfigError("source: kafka needs the kafka extra (pip install 'noetl-cloud[kafka]')") from None
    return Consumer(config)
