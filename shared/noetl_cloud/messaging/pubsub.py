"""Google Cloud Pub/Sub publisher (the emulator locally, through ``PUBSUB_EMULATOR_HOST``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent import futures

from google.api_core.exceptions import AlreadyExists, GoogleAPICallError
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from noetl_cloud.messaging.port import OutboundMessage

log = logging.getLogger(__name__)


class PubSubPublisher:
    """Publishes through one ``PublisherClient`` (thread-safe, batching, one per process)."""

    def __init__(
        self,
        project_id: str,
        *,
        emulator_host: str | None = None,
        timeout_s: float = 30.0,
        max_latency_s: float = 0.001,
    ) -> None:
        self.project_id = project_id
        self.timeout_s = timeout_s
        transport = None
        if emulator_host:
            # Named explicitly rather than left to the client's own read of PUBSUB_EMULATOR_HOST.
            import grpc  # type: ignore[import-untyped]
            from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

            transport = PublisherGrpcTransport(channel=grpc.insecure_channel(emulator_host))
        self.client = pubsub_v1.PublisherClient(
            transport=transport,
            batch_settings=pubsub_v1.types.BatchSettings(
                max_messages=1000, max_bytes=4 * 1024 * 1024, max_latency=max_latency_s
            ),
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
        )

    def topic_path(self, topic: str) -> str:
        return str(self.client.topic_path(self.project_id, topic))

    def publish(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
        pending: list[futures.Future[str] | None] = []
        for message in messages:
            try:
                pending.append(
                    self.client.publish(
                        self.topic_path(message.topic),
                        message.data,
                        ordering_key=message.ordering_key or "",
                        **message.attributes,
                    )
                )
            except (GoogleAPICallError, RuntimeError, ValueError) as exc:
                log.warning("publish to %s refused: %s", message.topic, type(exc).__name__)
                pending.append(None)
        out: list[str | None] = []
        resumed: set[tuple[str, str]] = set()
        for message, future in zip(messages, pending, strict=True):
            if future is None:
                out.append(None)
                continue
            try:
                out.append(future.result(timeout=self.timeout_s))
            except Exception as exc:  # noqa: BLE001 - any failure leaves the message for the sweep
                log.warning("publish to %s failed: %s", message.topic, type(exc).__name__)
                # A failure pauses its ordering key; resume it once (a second resume of a key raises).
                if message.ordering_key and (message.topic, message.ordering_key) not in resumed:
                    resumed.add((message.topic, message.ordering_key))
                    self._resume(message.topic, message.ordering_key)
                out.append(None)
        return out

    def _resume(self, topic: str, ordering_key: str) -> None:
        try:
            self.client.resume_publish(self.topic_path(topic), ordering_key)
        except RuntimeError:
            # "Ordering key is not paused": another caller sharing this client resumed it first.
            log.debug("ordering key of %s already resumed", topic)

    def ensure_topics(self, topics: Sequence[str]) -> None:
        for topic in topics:
            try:
                self.client.create_topic(name=self.topic_path(topic))
            except AlreadyExists:
                pass
