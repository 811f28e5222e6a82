"""``noetl-cloud subscribe <subscription.yaml> --local`` (RFC §5.1, Phase 6).

The same runtime as the Cloud Run service, with the control plane replaced by this process: the
subscription is held in-process, each message's playbook (``dispatch.playbook``, or the one an
allowlisted header routed it to) runs with the in-process runner, and every event -- the
lifecycle, each run's events, directives, dedup, the runtime's own, and the spool's -- is one JSON
line in the events file (a :class:`FileEventSink`). The spool backend is ``local_disk``.

A playbook's catalog path ``domain/ingest`` is read from ``<playbooks>/domain/ingest.yaml``, else
``<playbooks>/ingest.yaml`` (``<playbooks>`` defaults to the subscription file's folder).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from noetl_cloud.engine.local import JsonlSink, run_file
from noetl_cloud.envelope import EventEnvelope, EventFactory
from noetl_cloud.errors import BadRequest, Conflict, NoetlError
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.runtime.memory import EVENTS, TRANSITIONS
from noetl_cloud.runtime.port import ItemOutcome, RuntimeEvent
from noetl_cloud.spool.events import SpoolEvent
from noetl_cloud.tools.registry import default_registry

PRODUCER = "noetl-cloud subscribe"


class FileEventSink:
    """Canonical envelopes, one per line, from any thread."""

    def __init__(self, stream: IO[str]) -> None:
        self._sink = JsonlSink(stream)
        self._lock = threading.Lock()
        self._recorded: set[str] = set()  # the spool events' idempotency keys written so far
        self.stream = stream

    def emit(self, event: EventEnvelope) -> None:
        with self._lock:
            self._sink.emit(event)

    def record(self, events: Sequence[SpoolEvent]) -> int:
        """The spool's events (the spool journal's sink): at most one line per idempotency key, as the
        control plane's event log keeps them (the drainer writes an item's ``spooled`` event again
        before replaying it, in case the spool-time write was lost)."""
        factory = _factory()
        with self._lock:
            fresh = [e for e in events if e.idempotency_key not in self._recorded]
            self._recorded.update(e.idempotency_key for e in fresh)
        for e in fresh:
            stream = f"{'spool' if e.aggregate == 'subscription' else 'circuit'}/{e.subject}"
            self.emit(
                factory.new(
                    e.event_type,
                    stream_id=stream,
                    aggregate_type=e.aggregate,
                    aggregate_id=e.subject,
                    payload=e.payload,
                    idempotency_key=e.idempotency_key,
                    event_time=e.event_time,
                )
            )
        return len(fresh)


def _factory() -> EventFactory:
    return EventFactory(
        tenant_id="local", organization_id="local", producer=PRODUCER, next_id=SnowflakeGenerator().next_id
    )


def load_subscription(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadRequest(f"{path}: cannot read ({exc.strerror})", code="usage") from None
    if not isinstance(document, dict) or document.get("kind") != "Subscription":
        raise BadRequest(f"{path} is not a kind: Subscription document", code="not_a_subscription")
    return document


class _Claim:
    """The run of one message: set ``done`` once it started (``execution_id``) or did not (``None``)."""

    __slots__ = ("done", "execution_id")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.execution_id: str | None = None


def start_keys(request: dict[str, Any]) -> list[str]:
    """The keys a start claims in the in-process control plane: its dedup and delivery keys, and the
    source message's identity (subscription, message id, publish time), which a live delivery, a
    redelivery and a spooled copy's replay all carry in ``meta``: whichever copy comes second, and
    wherever it lands, is a duplicate of the first, as the control plane's delivery key makes it."""
    keys = []
    for kind in ("dedup", "delivery"):
        block = request.get(kind)
        if isinstance(block, dict) and block.get("key"):
            keys.append(f"{kind}/{block['key']}")
    meta = request.get("meta") or {}
    if meta.get("message_id"):
        stamp = f"@{meta['publish_time']}" if meta.get("publish_time") else ""
        keys.append(f"message/{meta.get('subscription_path') or '-'}/{meta['message_id']}{stamp}")
    return keys


class LocalControl:
    """The control plane of one local subscription: the lifecycle, in-process runs, a dedup window."""

    def __init__(
        self, document: dict[str, Any], playbooks: Path, sink: FileEventSink, http_allow: tuple[str, ...] = ()
    ) -> None:
        self.document = document
        self.http_allow = http_allow
        self.playbooks = playbooks
        self.sink = sink
        self.events = _factory()
        self.ids = SnowflakeGenerator()
        self.view: dict[str, Any] | None = None
        self.runs: list[dict[str, Any]] = []
        self._claims: dict[str, _Claim] = {}  # a started (or starting) message's keys -> its run
        self._lock = threading.Lock()

    def _lifecycle(self, event_type: str, payload: dict[str, Any]) -> None:
        assert self.view is not None
        sid = str(self.view["subscription_id"])
        self.sink.emit(
            self.events.new(
                event_type,
                stream_id=f"subscription/{sid}",
                aggregate_type="subscription",
                aggregate_id=sid,
                payload=payload,
            )
        )

    def load(self, path: str) -> dict[str, Any]:
        return self.document

    def register(self, path: str) -> dict[str, Any]:
        if self.view is None or self.view["state"] == "deactivated":
            self.view = {"subscription_id": str(self.ids.next_id()), "path": path, "state": "registered"}
            self._lifecycle("subscription.registered", {"path": path, "to_state": "registered"})
        return dict(self.view)

    def transition(self, subscription_id: str, action: str) -> dict[str, Any]:
        assert self.view is not None
        allowed, target = TRANSITIONS[action]
        current = self.view["state"]
        if current not in allowed:
            raise Conflict(f"cannot {action} a subscription that is {current}", code="invalid_transition")
        self.view["state"] = target
        self._lifecycle(EVENTS[action], {"path": self.view["path"], "from_state": current, "to_state": target})
        return dict(self.view)

    def state(self, subscription_id: str) -> dict[str, Any]:
        assert self.view is not None
        return dict(self.view)

    def playbook_file(self, catalog_path: str) -> Path | None:
        name = catalog_path.rsplit("/", 1)[-1]
        for candidate in (self.playbooks / f"{catalog_path}.yaml", self.playbooks / f"{name}.yaml"):
            if candidate.is_file():
                return candidate
        return None

    def dispatch(self, requests: Sequence[dict[str, Any]], *, batch: bool) -> list[ItemOutcome]:
        return [self._run(request) for request in requests]

    def _run(self, request: dict[str, Any]) -> ItemOutcome:
        keys = start_keys(request)
        while True:
            with self._lock:
                holder = next((self._claims[k] for k in keys if k in self._claims), None)
                if holder is None:  # claim every key of the message before it runs
                    claim = _Claim()
                    for key in keys:
                        self._claims[key] = claim
                    break
            holder.done.wait()  # a copy of this message is running now (the drain, a redelivery)
            if holder.execution_id is not None:
                dedup = request.get("dedup") or {}
                self._emit_dedup(request, str(dedup.get("key") or keys[0]), holder.execution_id)
                return ItemOutcome("duplicate", holder.execution_id)
        outcome: ItemOutcome | None = None
        try:
            outcome = self._start(request)
            return outcome
        finally:
            with self._lock:
                claim.execution_id = outcome.execution_id if outcome is not None else None
                if claim.execution_id is None:  # nothing started: a later copy may run
                    for key in keys:
                        if self._claims.get(key) is claim:
                            del self._claims[key]
                claim.done.set()

    def _start(self, request: dict[str, Any]) -> ItemOutcome:
        target = self.playbook_file(str(request["path"]))
        if target is None:
            return ItemOutcome("rejected", error={"code": "playbook_not_found", "message": str(request["path"])})
        try:
            tools = default_registry(http_allow=self.http_allow)
            result = run_file(target, request["workload"], tools=tools, sink=_Forward(self.sink))
        except NoetlError as exc:  # an invalid playbook file: can never succeed
            return ItemOutcome("rejected", error=exc.to_dict())
        directives = (request.get("meta") or {}).get("directives")
        if isinstance(directives, dict) and directives.get("applied"):
            self.sink.emit(
                self.events.new(
                    "subscription.message.directives_applied",
                    stream_id=f"execution/{result.execution_id}",
                    aggregate_type="execution",
                    aggregate_id=str(result.execution_id),
                    execution_id=str(result.execution_id),
                    payload=directives,
                    meta={"trace": request["trace"]} if request.get("trace") else {},
                )
            )
        with self._lock:
            self.runs.append({"execution_id": result.execution_id, "path": request["path"], "status": result.status})
        return ItemOutcome("accepted", str(result.execution_id))

    def _emit_dedup(self, request: dict[str, Any], key: str, original: str) -> None:
        self.sink.emit(
            self.events.new(
                "subscription.message.deduplicated",
                stream_id=f"subscription/{request.get('parent_execution_id') or '-'}/dedup",
                aggregate_type="subscription",
                aggregate_id=str(request.get("parent_execution_id") or "-"),
                execution_id=original,
                payload={
                    "dedup_key": key,
                    "original_execution_id": original,
                    "message_id": (request.get("meta") or {}).get("message_id"),
                },
            )
        )

    def record(self, subscription_id: str, events: Sequence[RuntimeEvent]) -> None:
        for event in events:
            self.sink.emit(
                self.events.new(
                    event.event_type,
                    stream_id=f"subscription/{subscription_id}/runtime",
                    aggregate_type="subscription",
                    aggregate_id=subscription_id,
                    payload=event.payload,
                    idempotency_key=event.idempotency_key,
                )
            )


class _Forward:
    """The runner's events, into the shared file sink."""

    def __init__(self, sink: FileEventSink) -> None:
        self.sink = sink

    def emit(self, event: EventEnvelope) -> None:
        self.sink.emit(event)


def subscribe(
    spec_file: Path,
    *,
    events_file: Path,
    playbooks: Path | None = None,
    spool_dir: Path | None = None,
    max_messages: int | None = None,
    duration_s: float | None = None,
    project_id: str | None = None,
    emulator_host: str | None = None,
    nats_url: str | None = None,
    kafka_servers: str | None = None,
    http_allow: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Hold the subscription until SIGINT / SIGTERM, ``max_messages`` acked, or ``duration_s``; a summary."""
    import signal
    import time

    from noetl_cloud.kv.file import FileKeyValueStore
    from noetl_cloud.kv.memory import InMemoryKeyValueStore
    from noetl_cloud.kv.port import KeyValueStore
    from noetl_cloud.runtime.service import SubscriptionRuntime, check_document
    from noetl_cloud.runtime.spooler import RuntimeSpooler
    from noetl_cloud.spec.subscription import SubscriptionDoc
    from noetl_cloud.spool.backends import FixedBackend
    from noetl_cloud.spool.engine import SpoolEngine
    from noetl_cloud.spool.events import EventJournal
    from noetl_cloud.spool.local_disk import LocalDiskSpool
    from noetl_cloud.spool.local_mode import DispatchReplayer, LocalDrainLoop

    document = load_subscription(spec_file)
    doc = check_document(str(spec_file), document)
    path = doc.path
    with open(events_file, "a", encoding="utf-8") as stream:
        sink = FileEventSink(stream)
        control = LocalControl(document, playbooks or spec_file.parent, sink, http_allow)
        # A spooling subscription keeps its circuit, backlog mark and drain leases beside its spool
        # folder (<folder>.state.json), so they survive a restart of the command (RFC §8.6).
        spool_folder = spool_dir or Path(doc.spec.spool.path or ".noetl-spool")
        kv: KeyValueStore = (
            InMemoryKeyValueStore()
            if doc.spec.spool.mode == "off"
            else FileKeyValueStore(spool_folder.with_name(spool_folder.name + ".state.json"))
        )
        drains: list[LocalDrainLoop] = []

        def source_for(held: SubscriptionDoc) -> Any:
            spec = held.spec
            if spec.source == "nats":
                from noetl_cloud.runtime.nats import NatsSource

                assert spec.stream is not None
                return NatsSource(
                    nats_url or "nats://127.0.0.1:4222",
                    stream=spec.stream,
                    consumer=spec.consumer or held.metadata.name,
                )
            if spec.source == "kafka":
                from noetl_cloud.runtime.kafka import KafkaSource

                assert spec.topic is not None
                servers = kafka_servers or "127.0.0.1:9092"
                return KafkaSource(servers, topic=spec.topic, group=spec.group or held.metadata.name)
            from noetl_cloud.runtime.pubsub import PubSubSource

            assert spec.subscription is not None
            return PubSubSource(spec.subscription, project_id=project_id, emulator_host=emulator_host)

        def spooler_for(held: SubscriptionDoc) -> RuntimeSpooler | None:
            if held.spec.spool.mode == "off":
                return None
            folder = spool_dir or Path(held.spec.spool.path or ".noetl-spool")
            engine = SpoolEngine(
                kv,
                EventJournal(sink, kv),
                FixedBackend(LocalDiskSpool(folder), f"local_disk://{folder}"),
                ids=SnowflakeGenerator().next_id,
            )
            spooler = RuntimeSpooler(engine, held.path, held.spec.spool.model_dump(mode="json"), "local:in-process")
            # No drainer role locally: this loop replays the spool in order once the runner answers.
            replayer = DispatchReplayer(lambda requests: control.dispatch(requests, batch=False))
            for loop in drains:
                loop.stop()
            drains[:] = [LocalDrainLoop(engine, spooler.target, replayer)]
            drains[0].start()
            return spooler

        runtime = SubscriptionRuntime(
            control,
            source_for,
            path=path,
            kv=kv,
            spooler_for=spooler_for,
            poll_s=0.2,
            concurrency=1,
            shutdown_s=5.0,
            end_on_stop=True,  # one process is the whole subscription: stopping it drains and deactivates
        )
        previous = {sig: signal.signal(sig, lambda *_: runtime.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
        thread = threading.Thread(target=runtime.run, name="subscribe", daemon=True)
        thread.start()
        started = time.monotonic()
        try:
            while thread.is_alive():
                acked = runtime.counters.value("runtime_acked", reason="accepted") + runtime.counters.value(
                    "runtime_acked", reason="duplicate"
                )
                if max_messages is not None and acked >= max_messages:
                    break
                if duration_s is not None and time.monotonic() - started >= duration_s:
                    break
                thread.join(0.1)
        finally:
            runtime.stop()
            thread.join(30)
            for loop in drains:
                loop.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return {
        "subscription": path,
        "runs": len(control.runs),
        "completed": sum(r["status"] == "completed" for r in control.runs),
        "events_file": str(events_file),
    }
