"""The runtime's pipe: leased messages in, executions out, each message acked only once it is safe.

Source threads hand leased messages to :meth:`Pipeline.offer`; one collector thread groups them
into chunks (``dispatch.batch_max`` messages within ``linger_s`` when ``batch_dispatch`` is on, one
message otherwise), waits for the rate governor, and hands each chunk to a small pool of
dispatch threads (``concurrency`` chunks in flight). For a chunk:

1. each message is normalized and planned (:func:`~noetl_cloud.runtime.message.prepare`); a
   payload that can never succeed is nacked (the source's dead-letter policy takes it);
2. the spool's gate decides: dispatch, or spool (the downstream circuit is open);
3. one ``/api/execute/batch`` call (or one ``/api/execute`` per message);
4. per message: accepted or deduplicated -> **ack**; rejected (4xx) -> nack; the control plane
   unavailable -> spool then ack (``buffer_and_ack``, or ``hybrid`` past its escalation) or
   **nack** (the source keeps it), and the next chunk waits a growing backoff.

Nothing is acked before the control plane accepted it or the spool holds it; anything still held
when the runtime stops is nacked (or, when the process dies, redelivered by the source).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from noetl_cloud import telemetry
from noetl_cloud.errors import NoetlError, Unavailable
from noetl_cloud.ingress.push import BadMessage
from noetl_cloud.observability import Counters
from noetl_cloud.runtime.governor import RateGovernor
from noetl_cloud.runtime.message import Prepared, prepare
from noetl_cloud.runtime.port import ControlClient, ItemOutcome, Received
from noetl_cloud.runtime.spooler import RuntimeSpooler

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class PipelineConfig:
    path: str
    spec: Mapping[str, Any]  # the subscription's ``spec`` as a mapping
    batch: bool
    batch_max: int
    linger_s: float
    concurrency: int

    @classmethod
    def from_spec(cls, path: str, spec: Mapping[str, Any], *, linger_s: float, concurrency: int) -> PipelineConfig:
        dispatch = spec.get("dispatch") or {}
        return cls(
            path=path,
            spec=spec,
            batch=bool(dispatch.get("batch_dispatch")),
            batch_max=int(dispatch.get("batch_max") or 100),
            linger_s=linger_s,
            concurrency=concurrency,
        )


class _Lease:
    """A held message, settled (acked or nacked) at most once."""

    __slots__ = ("received", "settled")

    def __init__(self, received: Received) -> None:
        self.received = received
        self.settled = False

    @property
    def message(self) -> Any:
        return self.received.message


class Pipeline:
    def __init__(
        self,
        config: PipelineConfig,
        control: ControlClient,
        *,
        subscription_id: Callable[[], str | None],
        governor: RateGovernor | None = None,
        spooler: RuntimeSpooler | None = None,
        counters: Counters | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.control = control
        self.subscription_id = subscription_id
        self.governor = governor or RateGovernor(None)
        self.spooler = spooler if spooler is not None and spooler.enabled else None
        self.counters = counters or Counters()
        self.monotonic = monotonic
        self.source = str(config.spec.get("source") or "pubsub")
        self._queue: queue.Queue[_Lease] = queue.Queue()
        self._held = 0
        self._held_lock = threading.Condition()
        self._accepting = threading.Event()
        self._halt = threading.Event()  # the process is going away: stop waiting, nack what is left
        self._slots = threading.Semaphore(config.concurrency)
        self._executor = ThreadPoolExecutor(config.concurrency, thread_name_prefix="dispatch")
        self._backoff_s = 0.0
        self._resume_at = 0.0
        self._collector: threading.Thread | None = None

    # -- intake (source threads) -------------------------------------------------------------

    def start(self) -> None:
        if self._collector is None:
            self._collector = threading.Thread(target=self._collect, name="collector", daemon=True)
            self._collector.start()
        self._accepting.set()

    def offer(self, received: Received) -> None:
        """A leased message from the source. Refused (nacked) while the pipeline does not accept."""
        self.counters.inc("runtime_received")
        if not self._accepting.is_set():
            received.nack()
            self.counters.inc("runtime_nacked", reason="not_accepting")
            return
        with self._held_lock:
            self._held += 1
        self._queue.put(_Lease(received))

    @property
    def held(self) -> int:
        """Messages leased to this process and not yet acked or nacked."""
        with self._held_lock:
            return self._held

    # -- stopping ----------------------------------------------------------------------------

    def refuse(self) -> None:
        """Stop accepting new messages (late deliveries are nacked); what is held still runs."""
        self._accepting.clear()

    def settle(self, timeout_s: float) -> bool:
        """Wait until every held message is acked or nacked; ``False`` when time ran out."""
        deadline = self.monotonic() + timeout_s
        with self._held_lock:
            while self._held > 0:
                remaining = deadline - self.monotonic()
                if remaining <= 0:
                    return False
                self._held_lock.wait(min(remaining, 0.1))
        return True

    def halt(self) -> int:
        """Give up: nack every message not yet in a dispatch; the number nacked."""
        self._halt.set()
        self._accepting.clear()
        nacked = 0
        while True:
            try:
                received = self._queue.get_nowait()
            except queue.Empty:
                break
            self._settle(received, ack=False, reason="shutdown")
            nacked += 1
        return nacked

    def close(self) -> None:
        self._halt.set()
        self._executor.shutdown(wait=False, cancel_futures=False)

    # -- the collector -----------------------------------------------------------------------

    def _collect(self) -> None:
        while not self._halt.is_set():
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            chunk = [first]
            size = self.governor.chunk(self.config.batch_max if self.config.batch else 1)
            deadline = self.monotonic() + self.config.linger_s
            while len(chunk) < size:
                remaining = deadline - self.monotonic()
                try:
                    chunk.append(self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait())
                except queue.Empty:
                    break
            wait = self._resume_at - self.monotonic()
            if wait > 0 and self._halt.wait(wait):
                self._give_back(chunk)
                return
            if not self.governor.admit(len(chunk), self._halt.wait):
                self._give_back(chunk)
                return
            while not self._slots.acquire(timeout=0.2):
                if self._halt.is_set():
                    self._give_back(chunk)
                    return
            self._executor.submit(self._run_chunk, chunk)

    def _give_back(self, chunk: Sequence[_Lease]) -> None:
        for received in chunk:
            self._settle(received, ack=False, reason="shutdown")

    def _run_chunk(self, chunk: list[_Lease]) -> None:
        try:
            self.process(chunk)
        except Exception:
            log.exception("dispatch of a chunk failed unexpectedly", extra={"subscription": self.config.path})
            for lease in chunk:
                if not lease.settled:
                    self._settle(lease, ack=False, reason="error")
        finally:
            self._slots.release()

    # -- one chunk ---------------------------------------------------------------------------

    def process(self, chunk: Sequence[_Lease]) -> None:
        """Dispatch one chunk and settle each of its messages (see the module docstring). With tracing
        on, the chunk is a ``runtime.dispatch`` span that starts a trace, as the public ingress's receive
        span does: its executions continue it (a message's own ``traceparent``, propagated by the
        subscription's directive, is kept as the span's ``noetl.upstream.traceparent``)."""
        if not telemetry.tracing():
            self._process(chunk)
            return
        attributes = {"noetl.subscription": self.config.path, "noetl.messages": len(chunk)}
        with telemetry.span("runtime.dispatch", attributes, root=True):
            self._process(chunk)

    def _process(self, chunk: Sequence[_Lease]) -> None:
        ready: list[tuple[_Lease, Prepared]] = []
        subscription_id = self.subscription_id()
        for received in chunk:
            try:
                ready.append(
                    (
                        received,
                        prepare(
                            received.message, self.config.spec, subscription_id=subscription_id, path=self.config.path
                        ),
                    )
                )
            except BadMessage as exc:
                log.warning(
                    "message can never succeed; nacked for the source's dead-letter policy",
                    extra={
                        "subscription": self.config.path,
                        "message_id": received.message.message_id,
                        "reason": exc.code,
                    },
                )
                self._settle(received, ack=False, reason=exc.code)
        if not ready:
            return
        if telemetry.tracing():
            for _lease, prepared in ready:
                trace = telemetry.forward_trace(prepared.request.get("trace"))
                if trace is not None:
                    prepared.request["trace"] = trace
        gate = None
        if self.spooler is not None:
            try:
                gate = self.spooler.gate()
            except Unavailable as exc:  # the circuit is open and the mode stops acking
                self._back_off()
                for received, _ in ready:
                    self._settle(received, ack=False, reason=exc.code)
                return
            if gate.action == "spool":
                for received, prepared in ready:
                    self._spool(received, prepared, gate.reason or "circuit_open")
                return
        outcomes = self.control.dispatch([p.request for _, p in ready], batch=self.config.batch)
        reached = any(o.status != "unavailable" for o in outcomes)
        if gate is not None and self.spooler is not None:
            self.spooler.report(gate, reached)
        if reached:
            self._backoff_s = 0.0
        else:
            self._back_off()
        self.counters.inc("runtime_dispatch_calls", mode="batch" if self.config.batch else "single")
        for (received, prepared), outcome in zip(ready, outcomes, strict=True):
            self._finish(received, prepared, outcome)

    def _finish(self, received: _Lease, prepared: Prepared, outcome: ItemOutcome) -> None:
        if outcome.done:
            self.counters.inc("runtime_dispatched", status=outcome.status)
            self._settle(received, ack=True, reason=outcome.status)
        elif outcome.status == "rejected":
            code = str((outcome.error or {}).get("code") or "rejected")
            log.warning(
                "the control plane refused the message; nacked for the source's dead-letter policy",
                extra={"subscription": self.config.path, "message_id": received.message.message_id, "code": code},
            )
            self._settle(received, ack=False, reason="rejected")
        elif self.spooler is not None and self.spooler.on_failure() == "spool":
            self._spool(received, prepared, "forward_failed")
        else:
            self._settle(received, ack=False, reason="unavailable")

    def _spool(self, received: _Lease, prepared: Prepared, reason: str) -> None:
        assert self.spooler is not None
        try:
            status = self.spooler.spool(prepared, self.source, reason)
        except NoetlError as exc:  # spool full (stop_acking) or its backend down: the source keeps it
            log.warning("message not spooled; nacked", extra={"subscription": self.config.path, "code": exc.code})
            self._settle(received, ack=False, reason=exc.code)
            return
        self.counters.inc("runtime_spooled", status=status)
        self._settle(received, ack=True, reason=status)

    def _back_off(self) -> None:
        self._backoff_s = min(MAX_BACKOFF_S, max(0.25, self._backoff_s * 2))
        self._resume_at = self.monotonic() + self._backoff_s

    def _settle(self, lease: _Lease, *, ack: bool, reason: str) -> None:
        if lease.settled:
            return
        lease.settled = True
        try:
            if ack:
                lease.received.ack()
            else:
                lease.received.nack()
        finally:
            self.counters.inc("runtime_acked" if ack else "runtime_nacked", reason=reason)
            with self._held_lock:
                self._held -= 1
                self._held_lock.notify_all()
