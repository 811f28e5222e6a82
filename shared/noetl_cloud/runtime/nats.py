"""NATS JetStream as a :class:`~noetl_cloud.runtime.port.SourceClient` (the ``nats`` extra: nats-py).

A durable pull consumer (``stream`` / ``consumer``, which must exist) is fetched in batches of at
most the free capacity (``max_in_flight`` minus what this process holds), so the runtime never
holds more than the cap; a message is acked with ``+ACK`` and nacked with ``-NAK`` (redelivered
at once). Headers are the message's NATS headers; the message id is ``Nats-Msg-Id`` when the
publisher set one, else the stream sequence. nats-py is asyncio: the client lives on an event loop
of its own thread and the port's methods are synchronous.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from noetl_cloud.errors import ConfigError, Unavailable
from noetl_cloud.runtime.port import Received, SourceMessage

log = logging.getLogger(__name__)

T = TypeVar("T")
ACK = b"+ACK"
NAK = b"-NAK"
FETCH_WAIT_S = 1.0


def _source_message(msg: Any) -> SourceMessage:
    headers = dict(msg.headers or {})
    meta = msg.metadata
    message_id = headers.get("Nats-Msg-Id") or str(meta.sequence.stream)
    return SourceMessage(
        message_id=str(message_id),
        data=bytes(msg.data),
        header_pairs=tuple((str(k), str(v)) for k, v in headers.items()),
        publish_time=meta.timestamp.isoformat() if getattr(meta, "timestamp", None) else None,
        delivery_attempt=int(meta.num_delivered) if meta.num_delivered else None,
    )


class _Delivery:
    __slots__ = ("_source", "ack_id", "counted", "message")

    def __init__(self, source: NatsSource, msg: Any, *, counted: bool = False) -> None:
        self._source = source
        self.counted = counted  # part of the continuous consumer's held count
        self.message = _source_message(msg)
        self.ack_id: str | None = str(msg.reply)

    def ack(self) -> None:
        self._source._settle(self, ACK)

    def nack(self) -> None:
        self._source._settle(self, NAK)


class NatsSource:
    def __init__(self, url: str, *, stream: str, consumer: str, batch: int = 256) -> None:
        self.url = url
        self.stream = stream
        self.consumer = consumer
        self.batch = batch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nc: Any = None
        self._sub: Any = None
        self._held = 0
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._task: Any = None

    # -- the event loop ------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="nats", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _connect(self) -> Any:
        if self._sub is None:
            try:
                import nats
            except ImportError:
                raise ConfigError("source: nats needs the nats extra (pip install 'noetl-cloud[nats]')") from None
            try:
                self._nc = await nats.connect(self.url, connect_timeout=5, max_reconnect_attempts=60)
                js = self._nc.jetstream()
                self._sub = await js.pull_subscribe_bind(self.consumer, stream=self.stream)
            except Exception as exc:  # noqa: BLE001 - nats-py raises its own hierarchy and OSError
                raise Unavailable(
                    f"NATS at {self.url} not reached: {type(exc).__name__}", code="source_unavailable"
                ) from None
        return self._sub

    async def _fetch(self, n: int, timeout_s: float) -> list[Any]:
        import nats.errors

        sub = await self._connect()
        try:
            return list(await sub.fetch(n, timeout=timeout_s))
        except nats.errors.TimeoutError:
            return []

    # -- continuous (Mode B) -------------------------------------------------------------------

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        if self._running.is_set():
            return
        self._running.set()

        async def loop() -> None:
            while self._running.is_set():
                with self._lock:
                    free = max_in_flight - self._held
                if free <= 0:
                    await asyncio.sleep(0.02)
                    continue
                try:
                    msgs = await self._fetch(min(free, self.batch), FETCH_WAIT_S)
                except Unavailable:
                    await asyncio.sleep(1.0)
                    continue
                for msg in msgs:
                    with self._lock:
                        self._held += 1
                    on_message(_Delivery(self, msg, counted=True))

        self._run(self._connect())
        assert self._loop is not None
        self._task = asyncio.run_coroutine_threadsafe(loop(), self._loop)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._running.clear()
        task, self._task = self._task, None
        if task is not None:
            try:
                task.result(timeout_s)
            except Exception:  # noqa: BLE001 - the fetch loop's end is all that matters here
                log.warning("NATS fetch loop ended with an error")

    # -- settling ------------------------------------------------------------------------------

    def _settle(self, delivery: _Delivery, verdict: bytes) -> None:
        if delivery.counted:
            delivery.counted = False
            with self._lock:
                self._held -= 1
        if delivery.ack_id:
            self._publish([delivery.ack_id], verdict)

    def _publish(self, subjects: Sequence[str], verdict: bytes) -> None:
        async def send() -> None:
            for subject in subjects:
                await self._nc.publish(subject, verdict)
            await self._nc.flush()

        if threading.current_thread() is self._thread:  # settled from a callback on the loop itself
            assert self._loop is not None
            self._loop.create_task(send())
            return
        self._run(send())

    # -- bounded (Mode A) ----------------------------------------------------------------------

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        msgs = self._run(self._fetch(max_messages, timeout_s), timeout_s + 30)
        return [_Delivery(self, m) for m in msgs]

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        self._run(self._connect())
        self._publish(list(ack_ids), ACK)

    def release(self, ack_ids: Sequence[str]) -> None:
        self._run(self._connect())
        self._publish(list(ack_ids), NAK)

    def close(self) -> None:
        self.stop()
        if self._nc is not None:
            try:
                self._run(self._nc.close(), 10)
            except Exception:  # noqa: BLE001 - closing a broken connection
                log.warning("NATS connection not closed cleanly")
            self._nc = self._sub = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            self._loop = None
