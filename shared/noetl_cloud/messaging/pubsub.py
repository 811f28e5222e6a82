"""Google Cloud Pub/Sub publisher (the emulator locally, through ``PUBSUB_EMULATOR_HOST``).

One message goes through the client library's batching publisher, which gathers the messages of
concurrent callers into shared requests. A call with several messages is sent as one ``Publish``
request per topic (up to 1,000 messages or 8 MiB each) on the generated API client: the batching
publisher keeps one batch, one request and one commit thread per ordering key, so a batch of 100
executions (100 ordering keys on the events topic) cost 100 requests and 100 threads. A request
keeps the order of its messages within each ordering key; the events' consumers fold an execution
to its log's tip, so two calls racing on one key need no order between them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent import futures

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1  # type: ignore[attr-defined]
from google.pubsub_v1 import PublisherClient as PublishApi
from google.pubsub_v1 import PubsubMessage

from noetl_cloud import telemetry
from noetl_cloud.messaging.port import OutboundMessage

log = logging.getLogger(__name__)

MAX_REQUEST_MESSAGES = 1000
MAX_REQUEST_BYTES = 8 * 1024 * 1024  # under the service's 10 MB request limit, with room for the envelope


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
        self.api = PublishApi(transport=transport) if transport is not None else PublishApi()

    def topic_path(self, topic: str) -> str:
        return str(self.client.topic_path(self.project_id, topic))

    def publish(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
        messages = telemetry.inject_attributes(messages)  # the current span's traceparent, when tracing
        if len(messages) > 1:
            return self._publish_requests(messages)
        return self._publish_batching(messages)

    def _publish_requests(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
        """One ``Publish`` request per topic and chunk; a failed request leaves its messages ``None``."""
        out: list[str | None] = [None] * len(messages)
        by_topic: dict[str, list[int]] = {}
        for i, message in enumerate(messages):
            by_topic.setdefault(message.topic, []).append(i)
        for topic, indexes in by_topic.items():
            for chunk in _chunks(indexes, messages):
                try:
                    response = self.api.publish(
                        topic=self.topic_path(topic),
                        messages=[
                            PubsubMessage(
                                data=messages[i].data,
                                attributes=messages[i].attributes,
                                ordering_key=messages[i].ordering_key or "",
                            )
                            for i in chunk
                        ],
                        timeout=self.timeout_s,
                    )
                except Exception as exc:  # noqa: BLE001 - any failure leaves the messages for the sweep
                    log.warning("publish of %d messages to %s failed: %s", len(chunk), topic, type(exc).__name__)
                    continue
                for i, server_id in zip(chunk, response.message_ids, strict=True):
                    out[i] = server_id
        return out

    def _publish_batching(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
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
            except Exception as exc:  # noqa: BLE001 - any refusal leaves the message for the sweep
                # Besides GoogleAPICallError, RuntimeError and ValueError, the library asserts at submit
                # when a concurrent caller's failure has just put the key's open batch in error status
                # ("Publish after stop() or publish error."): an AssertionError, never a reason for a 500.
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


def _chunks(indexes: list[int], messages: Sequence[OutboundMessage]) -> list[list[int]]:
    """``indexes`` cut into requests of at most :data:`MAX_REQUEST_MESSAGES` messages and about
    :data:`MAX_REQUEST_BYTES` bytes (a single larger message goes alone; the service judges it)."""
    chunks: list[list[int]] = [[]]
    size = 0
    for i in indexes:
        m = messages[i]
        weight = len(m.data) + len(m.ordering_key or "") + sum(len(k) + len(v) for k, v in m.attributes.items()) + 32
        if chunks[-1] and (len(chunks[-1]) >= MAX_REQUEST_MESSAGES or size + weight > MAX_REQUEST_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += weight
    return chunks
