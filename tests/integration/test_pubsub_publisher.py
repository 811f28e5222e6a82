"""The Pub/Sub publisher adapter against the emulator: a failed ordered publish leaves its message for
the outbox sweep and never raises, also when callers sharing the client fail on one ordering key at once
(each failure pauses the key; only the first resume finds it paused)."""

from __future__ import annotations

import secrets
import threading

from google.cloud import pubsub_v1

from noetl_cloud.messaging.port import OutboundMessage
from noetl_cloud.messaging.pubsub import PubSubPublisher

PROJECT = "noetl-local"


def test_concurrent_failures_on_one_ordering_key_all_return_none_and_the_key_publishes_again(
    local_env: dict[str, str],
) -> None:
    publisher = PubSubPublisher(PROJECT, emulator_host=local_env["PUBSUB_EMULATOR_HOST"])
    missing = f"missing-{secrets.token_hex(4)}"  # never created: every publish to it fails
    message = OutboundMessage(topic=missing, data=b"{}", attributes={}, ordering_key="execution-1")
    barrier = threading.Barrier(8)
    results: list[list[str | None]] = []
    errors: list[BaseException] = []

    def publish() -> None:
        barrier.wait()
        try:
            results.append(publisher.publish([message, message]))
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert results == [[None, None]] * 8

    admin = pubsub_v1.PublisherClient()
    topic = admin.topic_path(PROJECT, missing)
    admin.create_topic(name=topic)
    try:  # the key is not left paused: once the topic exists the same key publishes
        (server_id,) = publisher.publish([message])
        assert server_id
    finally:
        admin.delete_topic(topic=topic)
