"""The subscription runtime (Mode B): one ``kind: Subscription`` held open, its lifecycle followed.

At start it reads the subscription from the catalog, registers it (a live registration of the path
is reused, so a restarted runtime continues the same subscription and its dedup window) and
activates it. Then, every ``poll_s``, it follows the subscription's state in the control plane:

* ``active`` -> pulling (the source delivers into the :class:`~noetl_cloud.runtime.pipeline.Pipeline`);
* ``paused`` -> the source stops fetching; held messages are still dispatched (none is lost);
* ``draining`` -> stop fetching, finish what is held, ``deactivate``, exit;
* ``deactivated`` -> stop fetching, finish or nack what is held, exit.

:meth:`SubscriptionRuntime.stop` (SIGTERM: Cloud Run gives 10 s) is about this instance only: it
stops fetching, finishes what it holds within ``shutdown_s``, nacks the rest (the source redelivers
them to the other instances) and exits, leaving the subscription ``active``. Cloud Run sends SIGTERM
on every scale-in, roll-out and host maintenance, so the other instances keep pulling, and a
restarted instance registers the same path again: the live registration is reused, with its
subscription id and dedup window. Only an operator's transition (``drain``, ``deactivate``) ends the
subscription for every instance.

A subscription whose ``runtime.singleton`` is true is pulled by one instance at a time: the holder
of the lease ``runtime/<path>`` in the coordination store (Firestore); another instance waits,
renewing nothing, until the lease is free.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from noetl_cloud.errors import ConfigError, Conflict, NoetlError, ValidationFailed
from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.observability import Counters
from noetl_cloud.runtime.governor import RateGovernor
from noetl_cloud.runtime.pipeline import Pipeline, PipelineConfig
from noetl_cloud.runtime.port import ControlClient, RuntimeEvent, SourceClient
from noetl_cloud.runtime.spooler import RuntimeSpooler
from noetl_cloud.spec.common import problem_details
from noetl_cloud.spec.subscription import SubscriptionDoc

log = logging.getLogger(__name__)

RATE_LIMITED = "subscription.rate_limited"
SOURCES = ("pubsub", "nats", "kafka")


def check_document(path: str, document: dict[str, Any]) -> SubscriptionDoc:
    """The subscription a runtime can hold: a valid ``mode: pull``, ``activation: continuous`` one."""
    try:
        doc = SubscriptionDoc.model_validate(document)
    except ValidationError as exc:
        raise ValidationFailed(
            f"{path} is not a valid Subscription",
            code="invalid_subscription",
            details=problem_details(exc),  # {field, problem, type}, as the catalog answers them
        ) from None
    spec = doc.spec
    if spec.mode != "pull":
        raise ConfigError(f"{path} is a push subscription: the ingress receives it", code="not_a_pull_subscription")
    if spec.activation != "continuous":
        raise ConfigError(
            f"{path} is activation: scheduled: the subscription tool drains it (Mode A)", code="not_continuous"
        )
    if spec.source not in SOURCES:
        raise ConfigError(f"no source client for {spec.source!r} (have: {', '.join(SOURCES)})", code="unknown_source")
    return doc


class SubscriptionRuntime:
    def __init__(
        self,
        control: ControlClient,
        source_for: Callable[[SubscriptionDoc], SourceClient],
        *,
        path: str,
        kv: KeyValueStore | None = None,
        spooler_for: Callable[[SubscriptionDoc], RuntimeSpooler | None] | None = None,
        poll_s: float = 2.0,
        linger_s: float = 0.02,
        concurrency: int = 4,
        shutdown_s: float = 8.0,
        lease_ttl_s: float = 15.0,
        instance: str | None = None,
        end_on_stop: bool = False,
        counters: Counters | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.control = control
        self.source_for = source_for
        self.path = path
        self.kv = kv
        self.spooler_for = spooler_for
        self.poll_s = poll_s
        self.linger_s = linger_s
        self.concurrency = concurrency
        self.shutdown_s = shutdown_s
        self.lease_ttl_s = lease_ttl_s
        self.instance = instance or uuid.uuid4().hex[:12]
        # The only instance there is (``noetl-cloud subscribe --local``): stopping it ends the subscription.
        self.end_on_stop = end_on_stop
        self.counters = counters or Counters()
        self.monotonic = monotonic
        self.phase = "starting"  # starting | waiting_for_lease | pulling | paused | stopping | stopped
        self.subscription_id: str | None = None
        self.doc: SubscriptionDoc | None = None
        self.pipeline: Pipeline | None = None
        self.source: SourceClient | None = None
        self.governor: RateGovernor | None = None
        self._pulling = False
        self._terminate = threading.Event()
        self._stopped = threading.Event()
        self._episodes = 0

    # -- what the health server reads ----------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "subscription": self.path,
            "subscription_id": self.subscription_id,
            "instance": self.instance,
            "pulling": self._pulling,
            "held": self.pipeline.held if self.pipeline is not None else 0,
            "source": getattr(self.source, "stats", lambda: None)(),
        }

    @property
    def ready(self) -> bool:
        return self._pulling or self.phase in ("paused", "waiting_for_lease")

    # -- control -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask this instance to shut down (SIGTERM); :meth:`run` returns once it has. The subscription
        stays active for the other instances unless ``end_on_stop``."""
        self._terminate.set()

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        return self._stopped.wait(timeout_s)

    def run(self) -> int:
        """Hold the subscription until it is drained, deactivated or the runtime is stopped; 0."""
        try:
            if not self._start():
                return 0
            while not self._terminate.is_set():
                if self._follow():
                    return 0
                self._terminate.wait(self.poll_s)
            self._shutdown(record=self.end_on_stop)  # else this instance leaves; the subscription stays active
            return 0
        finally:
            self.phase = "stopped"
            self._stopped.set()

    # -- start ---------------------------------------------------------------------------------

    def _start(self) -> bool:
        """Load, register and activate (retrying while the control plane is unavailable)."""
        backoff = 0.5
        view: dict[str, Any] = {}
        while not self._terminate.is_set():
            try:
                self.doc = check_document(self.path, self.control.load(self.path))
                view = self.control.register(self.path)
                self.subscription_id = str(view["subscription_id"])
                if view["state"] == "registered":
                    view = self._transition("activate") or view
                break
            except NoetlError as exc:
                if not exc.retryable and exc.status < 500:
                    raise
                log.warning("control plane not reached at start; retrying", extra={"code": exc.code})
                self._terminate.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        if self._terminate.is_set() or self.doc is None:
            return False
        spec = self.doc.spec
        self.source = self.source_for(self.doc)
        self.governor = RateGovernor(spec.limits.max_dispatch_per_sec, on_limited=self._rate_limited)
        spooler = self.spooler_for(self.doc) if self.spooler_for is not None else None
        self.pipeline = Pipeline(
            PipelineConfig.from_spec(
                self.path, self.doc.spec.model_dump(mode="json"), linger_s=self.linger_s, concurrency=self.concurrency
            ),
            self.control,
            subscription_id=lambda: self.subscription_id,
            governor=self.governor,
            spooler=spooler,
            counters=self.counters,
            monotonic=self.monotonic,
        )
        log.info(
            "subscription runtime started",
            extra={
                "subscription": self.path,
                "subscription_id": self.subscription_id,
                "instance": self.instance,
                "state": view["state"],
            },
        )
        return True

    @property
    def max_in_flight(self) -> int:
        assert self.doc is not None
        spec = self.doc.spec
        caps = [spec.runtime.max_in_flight] + ([spec.limits.max_in_flight] if spec.limits.max_in_flight else [])
        return min(caps)

    # -- following the lifecycle -----------------------------------------------------------------

    def _follow(self) -> bool:
        """One look at the subscription's state; ``True`` when the runtime is done."""
        assert self.subscription_id is not None
        try:
            state = self.control.state(self.subscription_id)["state"]
        except NoetlError as exc:
            log.warning("subscription state not read; keeping the current one", extra={"code": exc.code})
            return False
        if state in ("draining", "deactivated"):
            log.info("subscription is %s; finishing", state, extra={"subscription": self.path})
            self._shutdown(record=state == "draining")
            return True
        if state == "paused":
            if self._pulling:
                self._stop_pulling()
            self.phase = "paused"
            return False
        if state != "active":
            return False
        if not self._leader():
            if self._pulling:
                self._stop_pulling()
            self.phase = "waiting_for_lease"
            return False
        if not self._pulling:
            self._start_pulling()
        return False

    def _leader(self) -> bool:
        """Whether this instance may pull: always, unless the spec asks for a singleton."""
        assert self.doc is not None
        if not self.doc.spec.runtime.singleton:
            return True
        if self.kv is None:
            raise ConfigError("a singleton subscription needs the coordination store", code="config_missing")
        try:
            return self.kv.acquire_lease(self.lease_name, self.instance, self.lease_ttl_s) is not None
        except NoetlError as exc:  # cannot prove we hold it: do not pull
            log.warning("runtime lease not renewed", extra={"code": exc.code})
            return False

    @property
    def lease_name(self) -> str:
        return f"runtime/{self.path}"

    def _start_pulling(self) -> None:
        assert self.pipeline is not None and self.source is not None
        self.pipeline.start()
        self.source.start(self.pipeline.offer, max_in_flight=self.max_in_flight)
        self._pulling = True
        self.phase = "pulling"
        log.info("pulling", extra={"subscription": self.path, "max_in_flight": self.max_in_flight})

    def _stop_pulling(self, settle_s: float = 30.0) -> bool:
        """Stop fetching and let held messages finish (or time out); ``True`` when all settled."""
        assert self.pipeline is not None and self.source is not None
        self.source.stop()
        self.pipeline.refuse()
        self._pulling = False
        settled = self.pipeline.settle(settle_s)
        log.info("stopped pulling", extra={"subscription": self.path, "settled": settled})
        return settled

    def _shutdown(self, *, record: bool) -> None:
        """Stop fetching, finish or nack what is held; with ``record`` (an operator's drain) also
        record draining and deactivated (the first instance done records them, the others find
        them recorded)."""
        self.phase = "stopping"
        started = self.monotonic()
        if self.pipeline is not None and self.source is not None:
            budget = max(0.5, self.shutdown_s - 1.5)  # leave time for the lifecycle calls
            if not self._stop_pulling(settle_s=budget):
                nacked = self.pipeline.halt()
                self.pipeline.settle(max(0.1, self.shutdown_s - 1.0 - (self.monotonic() - started)))
                log.warning("shutdown nacked held messages", extra={"nacked": nacked, "held": self.pipeline.held})
            self.source.close()
            self.pipeline.close()
        if record and self.subscription_id is not None:
            self._transition("drain")
            self._transition("deactivate")
        if self.doc is not None and self.doc.spec.runtime.singleton and self.kv is not None:
            try:
                self.kv.release_lease(self.lease_name, self.instance)
            except NoetlError:
                log.warning("runtime lease not released; it expires on its own")

    def _transition(self, action: str) -> dict[str, Any] | None:
        assert self.subscription_id is not None
        try:
            return self.control.transition(self.subscription_id, action)
        except Conflict:  # already there, or moved by an operator: the state machine decides
            return None
        except NoetlError as exc:
            log.warning("lifecycle transition not recorded", extra={"action": action, "code": exc.code})
            return None

    # -- events --------------------------------------------------------------------------------

    def _rate_limited(self, wait_s: float) -> None:
        """Limiting started: one ``subscription.rate_limited`` event for this episode."""
        self.counters.inc("runtime_rate_limited")
        self._episodes += 1
        sid = self.subscription_id or "-"
        assert self.doc is not None
        event = RuntimeEvent(
            RATE_LIMITED,
            {
                "path": self.path,
                "max_dispatch_per_sec": self.doc.spec.limits.max_dispatch_per_sec,
                "wait_s": round(wait_s, 3),
                "held": self.pipeline.held if self.pipeline is not None else 0,
                "instance": self.instance,
            },
            idempotency_key=f"{sid}/{RATE_LIMITED}/{self.instance}/{self._episodes}",
            event_time=datetime.now(UTC).isoformat(),
        )
        self.control.record(sid, [event])
