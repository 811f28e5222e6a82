"""Wiring the subscription runtime from settings, and serving it: what ``functions/subscription_runtime/main.py`` runs.

Nothing connects while wiring: the API client, the coordination store and the source open their
connections on first use.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping
from types import FrameType

from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.observability import configure_logging
from noetl_cloud.runtime.api import ApiControlClient
from noetl_cloud.runtime.health import HealthServer, build_app
from noetl_cloud.runtime.port import SourceClient
from noetl_cloud.runtime.service import SubscriptionRuntime
from noetl_cloud.runtime.spooler import RuntimeSpooler
from noetl_cloud.settings import Settings
from noetl_cloud.spec.subscription import SubscriptionDoc
from noetl_cloud.spool.bootstrap import api_client, build_engine, downstream_of, kv_from_settings

log = logging.getLogger(__name__)

ROLE = "subscription_runtime"


def source_for(settings: Settings, doc: SubscriptionDoc) -> SourceClient:
    """The source client of a subscription (Pub/Sub; NATS JetStream with the ``nats`` extra; Kafka,
    as a member of the consumer group ``group`` (default: the subscription's name), with the
    ``kafka`` extra)."""
    spec = doc.spec
    if spec.source == "kafka":
        from noetl_cloud.runtime.kafka import KafkaSource

        settings.require("kafka_bootstrap_servers")
        assert settings.kafka_bootstrap_servers is not None and spec.topic is not None
        return KafkaSource(settings.kafka_bootstrap_servers, topic=spec.topic, group=spec.group or doc.metadata.name)
    if spec.source == "nats":
        from noetl_cloud.runtime.nats import NatsSource

        settings.require("nats_url")
        assert settings.nats_url is not None and spec.stream is not None
        return NatsSource(settings.nats_url, stream=spec.stream, consumer=spec.consumer or doc.metadata.name)
    from noetl_cloud.runtime.pubsub import PubSubSource

    assert spec.subscription is not None
    return PubSubSource(
        spec.subscription,
        project_id=settings.project_id,
        emulator_host=settings.pubsub_emulator_host,
        lease_extension_s=settings.runtime_lease_extension_s,
    )


def runtime_from_settings(settings: Settings, *, kv: KeyValueStore | None = None) -> SubscriptionRuntime:
    settings.require("subscription_path", "api_url")
    assert settings.subscription_path is not None
    api = api_client(settings, timeout_s=15.0, retries=1)
    store = kv or kv_from_settings(settings)

    def spooler_for(doc: SubscriptionDoc) -> RuntimeSpooler | None:
        if doc.spec.spool.mode == "off":
            return None
        engine = build_engine(settings, api, store)
        spool = doc.spec.spool.model_dump(mode="json")
        return RuntimeSpooler(engine, doc.path, spool, downstream_of(settings), doc.spec.downstreams)

    return SubscriptionRuntime(
        ApiControlClient(api),
        lambda doc: source_for(settings, doc),
        path=settings.subscription_path,
        kv=store,
        spooler_for=spooler_for,
        poll_s=settings.runtime_poll_s,
        linger_s=settings.runtime_linger_ms / 1000.0,
        concurrency=settings.runtime_concurrency,
        shutdown_s=settings.runtime_shutdown_s,
        lease_ttl_s=settings.runtime_lease_ttl_s,
    )


def serve(env: Mapping[str, str]) -> int:
    """Health on ``$PORT`` and the runtime loop until SIGTERM. A runtime whose subscription was
    drained or deactivated keeps answering health (phase ``stopped``) instead of exiting, so a
    platform that restarts exited containers does not register the subscription again."""
    settings = Settings.from_env({k: v for k, v in env.items() if k != "PORT"}, role=ROLE)
    configure_logging(settings.log_level, project_id=settings.project_id, role=ROLE)
    port = int(env.get("PORT") or 8080)
    runtime = runtime_from_settings(settings) if settings.subscription_path else None
    server = HealthServer(build_app(settings, runtime), port)
    server.start()
    terminated = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        terminated.set()
        if runtime is not None:
            runtime.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if runtime is None:
            log.warning("no NOETL_SUBSCRIPTION_PATH: serving health only")
        else:
            runtime.run()
        while not terminated.wait(1.0):
            pass
    finally:
        server.stop()
    return 0
