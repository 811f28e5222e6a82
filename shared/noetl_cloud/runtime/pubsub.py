"""Google Cloud Pub/Sub as a :class:`~noetl_cloud.runtime.port.SourceClient` (the emulator locally).

Continuous consumption is the official client's streaming pull with ``FlowControl``: at most
``max_in_flight`` messages are leased to this process (the client stops fetching at the cap and
extends the leases of what it holds); the callback only hands a message to the runtime's pipeline.
Stopping cancels the stream: the client nacks what it fetched but had not handed over. A bounded
pull (Mode A) is the synchronous ``pull`` RPC; its messages are acked by id.

**Idle sweeps.** While the stream has delivered nothing for ``idle_pull_s`` and this process holds
fewer than ``max_in_flight`` messages, a synchronous pull takes up to the free capacity and hands
it to the same callback (their leases are extended here while they are held). On Google Cloud the
stream delivers a backlog by itself and the sweep finds nothing; the Pub/Sub emulator pushes to a
stream only when something is published, so without the sweep a reopened stream (after a pause,
a restart, a crash) would not see the backlog nor the messages it nacked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

from google.api_core.exceptions import DeadlineExceeded, GoogleAPICallError, RetryError
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from noetl_cloud.errors import Unavailable
from noetl_cloud.runtime.port import Received, SourceMessage

log = logging.getLogger(__name__)

MAX_LEASE_S = 3600  # how long the client keeps extending a held message's lease
# Each lease extension (and the stream's ack deadline) is at most this long: a crashed instance's
# messages go back to the subscription within it. The client renews a lease after a random part of
# 90 % of it, so a short one expires whenever the renewal is late by the rest: at 10 s, a loaded
# 2-core machine saw one message in six redelivered (and dispatched twice) while still held.
LEASE_EXTENSION_S = 30
ACK_CHUNK = 1000  # ack ids per acknowledge / modify_ack_deadline call
IDLE_PULL_S = 2.0  # a stream silent this long gets a synchronous sweep
SWEEP_LEASE_S = 60  # swept messages held longer than EXTEND_AFTER_S get this much more time
EXTEND_AFTER_S = 5.0


def subscription_path(subscription: str, project_id: str | None) -> str:
    """``projects/<p>/subscriptions/<s>`` from a full path or a short name in ``project_id``."""
    if subscription.startswith("projects/"):
        return subscription
    if not project_id:
        raise Unavailable(f"subscription {subscription!r} is a short name and no project is set", code="config_missing")
    return f"projects/{project_id}/subscriptions/{subscription}"


def _source_message(message: Any) -> SourceMessage:
    publish_time = getattr(message, "publish_time", None)
    return SourceMessage(
        message_id=str(message.message_id),
        data=bytes(message.data),
        header_pairs=tuple((str(k), str(v)) for k, v in message.attributes.items()),
        publish_time=publish_time.isoformat() if publish_time is not None else None,
        ordering_key=message.ordering_key or None,
        delivery_attempt=getattr(message, "delivery_attempt", None) or None,
    )


class _Streamed:
    """A message of the streaming pull (the client's lease manager holds it until ack / nack)."""

    __slots__ = ("_message", "_source", "ack_id", "message")

    def __init__(self, message: Any, source: PubSubSource) -> None:
        self._message = message
        self._source = source
        self.message = _source_message(message)
        self.ack_id = str(message.ack_id)

    def ack(self) -> None:
        self._source._streamed_done()
        if self._source.streaming:
            self._message.ack()
        else:  # the stream's manager is closed and would drop it: ack by id (see ``PubSubSource.stop``)
            self._source.settle_by_id(self.ack_id, ack=True)

    def nack(self) -> None:
        self._source._streamed_done()
        if self._source.streaming:
            self._message.nack()
        else:
            self._source.settle_by_id(self.ack_id, ack=False)


class _Pulled:
    """A message of a synchronous pull: acked / nacked by id."""

    __slots__ = ("_source", "ack_id", "message")

    def __init__(self, source: PubSubSource, received: Any) -> None:
        self._source = source
        self.ack_id = str(received.ack_id)
        self.message = _source_message(received.message)
        if received.delivery_attempt:
            self.message = SourceMessage(
                self.message.message_id,
                self.message.data,
                self.message.header_pairs,
                self.message.publish_time,
                self.message.ordering_key,
                int(received.delivery_attempt),
            )

    def ack(self) -> None:
        self._source._swept_done(self.ack_id)
        self._source.acknowledge([self.ack_id])

    def nack(self) -> None:
        self._source._swept_done(self.ack_id)
        self._source.release([self.ack_id])


class PubSubSource:
    def __init__(
        self,
        subscription: str,
        *,
        project_id: str | None = None,
        emulator_host: str | None = None,
        max_lease_s: int = MAX_LEASE_S,
        lease_extension_s: int = LEASE_EXTENSION_S,
        idle_pull_s: float | None = IDLE_PULL_S,
    ) -> None:
        self.path = subscription_path(subscription, project_id)
        self.emulator_host = emulator_host
        self.max_lease_s = max_lease_s
        self.lease_extension_s = lease_extension_s
        self.idle_pull_s = idle_pull_s
        self._client: pubsub_v1.SubscriberClient | None = None
        self._future: Any = None
        self._lock = threading.Lock()
        self._streamed_held = 0
        self._swept: dict[str, float] = {}  # ack id -> when it was pulled (held, not settled)
        self._last_delivery = 0.0
        self._sweeper: threading.Thread | None = None
        self._stop_sweeping = threading.Event()
        self.swept = 0

    @property
    def client(self) -> pubsub_v1.SubscriberClient:
        if self._client is None:
            transport = None
            if self.emulator_host:
                import grpc  # type: ignore[import-untyped]
                from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

                transport = SubscriberGrpcTransport(channel=grpc.insecure_channel(self.emulator_host))
            self._client = pubsub_v1.SubscriberClient(transport=transport)
        return self._client

    # -- continuous (Mode B) -------------------------------------------------------------------

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        if self._future is not None:
            return
        flow = pubsub_v1.types.FlowControl(
            max_messages=max_in_flight,
            max_bytes=max(max_in_flight, 1) * 1024 * 1024,
            max_lease_duration=self.max_lease_s,
            max_duration_per_lease_extension=self.lease_extension_s,
        )

        def callback(message: Any) -> None:
            with self._lock:
                self._streamed_held += 1
                self._last_delivery = time.monotonic()
            on_message(_Streamed(message, self))

        with self._lock:
            self._last_delivery = time.monotonic()
        self._future = self.client.subscribe(self.path, callback, flow_control=flow)
        self._future.add_done_callback(self._ended)
        if self.idle_pull_s:
            self._stop_sweeping.clear()
            self._sweeper = threading.Thread(
                target=self._sweep, args=(on_message, max_in_flight), name="pubsub-sweep", daemon=True
            )
            self._sweeper.start()

    def _streamed_done(self) -> None:
        with self._lock:
            self._streamed_held -= 1

    def _swept_done(self, ack_id: str) -> None:
        with self._lock:
            self._swept.pop(ack_id, None)

    def _sweep(self, on_message: Callable[[Received], None], max_in_flight: int) -> None:
        assert self.idle_pull_s is not None
        while not self._stop_sweeping.wait(min(1.0, self.idle_pull_s)):
            now = time.monotonic()
            with self._lock:
                idle = now - self._last_delivery >= self.idle_pull_s
                free = max_in_flight - self._streamed_held - len(self._swept)
                stale = [a for a, at in self._swept.items() if now - at >= EXTEND_AFTER_S]
                for ack_id in stale:
                    self._swept[ack_id] = now
            if stale:
                self._extend(stale)
            if not idle or free <= 0:
                continue
            try:
                pulled = self.fetch(free, 5.0)
            except Unavailable:
                continue
            with self._lock:
                for delivery in pulled:
                    self._swept[delivery.ack_id or ""] = time.monotonic()
                self.swept += len(pulled)
            for delivery in pulled:
                if self._stop_sweeping.is_set():
                    delivery.nack()
                else:
                    on_message(delivery)

    def _extend(self, ack_ids: Sequence[str]) -> None:
        try:
            self.client.modify_ack_deadline(
                request={"subscription": self.path, "ack_ids": list(ack_ids), "ack_deadline_seconds": SWEEP_LEASE_S}
            )
        except GoogleAPICallError:
            log.warning("lease extension on %s failed; the messages may be redelivered", self.path)

    def _ended(self, future: Any) -> None:
        exc = future.exception() if not future.cancelled() else None
        if exc is not None:
            log.error("streaming pull ended: %s", type(exc).__name__, extra={"subscription": self.path})

    def stats(self) -> dict[str, int]:
        """What this source holds and has swept (for ``/status``)."""
        with self._lock:
            return {"streamed_held": self._streamed_held, "swept_held": len(self._swept), "swept": self.swept}

    @property
    def streaming(self) -> bool:
        return self._future is not None and not self._future.done()

    def settle_by_id(self, ack_id: str, *, ack: bool) -> None:
        """Ack (or nack) a streamed message after its stream stopped, through the unary calls."""
        try:
            if ack:
                self.acknowledge([ack_id])
            else:
                self.release([ack_id])
        except Unavailable:
            log.warning("ack of a streamed message on %s failed; it may be redelivered", self.path)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop fetching. Messages handed to the runtime stay leased until it settles them: the
        client's closed stream manager drops a later ``ack()`` (the message would come back after
        its deadline and run again), so those are acked by id instead."""
        self._stop_sweeping.set()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.join(timeout_s)
        future, self._future = self._future, None
        if future is None:
            return
        future.cancel()
        try:
            future.result(timeout=timeout_s)
        except (futures.CancelledError, futures.TimeoutError, GoogleAPICallError, RetryError):
            pass

    # -- bounded (Mode A) ----------------------------------------------------------------------

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        try:
            response = self.client.pull(
                request={"subscription": self.path, "max_messages": max_messages}, timeout=timeout_s
            )
        except (DeadlineExceeded, RetryError):
            return []
        except GoogleAPICallError as exc:
            raise Unavailable(
                f"pull from {self.path} failed: {type(exc).__name__}", code="source_unavailable"
            ) from None
        return [_Pulled(self, r) for r in response.received_messages]

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        for start in range(0, len(ack_ids), ACK_CHUNK):
            chunk = list(ack_ids[start : start + ACK_CHUNK])
            try:
                self.client.acknowledge(request={"subscription": self.path, "ack_ids": chunk})
            except GoogleAPICallError as exc:
                raise Unavailable(
                    f"ack on {self.path} failed: {type(exc).__name__}", code="source_unavailable"
                ) from None

    def release(self, ack_ids: Sequence[str]) -> None:
        """Nack by id: the messages are redelivered at once."""
        for start in range(0, len(ack_ids), ACK_CHUNK):
            chunk = list(ack_ids[start : start + ACK_CHUNK])
            try:
                self.client.modify_ack_deadline(
                    request={"subscription": self.path, "ack_ids": chunk, "ack_deadline_seconds": 0}
                )
            except GoogleAPICallError:
                log.warning("nack on %s failed; the ack deadline redelivers", self.path)

    def close(self) -> None:
        self.stop()
        if self._client is not None:
            self._client.close()
            self._client = None
