from __future__ import annotations

import base64
import itertools
import json

import pytest

from noetl_cloud.ingress.push import BadMessage, pubsub_message, webhook_message

IDS = (f"gen-{i}" for i in itertools.count())
DROP = frozenset({"authorization", "x-signature"})


def new_id() -> str:
    return next(IDS)


def test_webhook_json_body_and_headers_without_credentials() -> None:
    pushed = webhook_message(
        b'{"a": 1}',
        [
            ("Content-Type", "application/json"),
            ("X-Signature", "abc"),
            ("Authorization", "x"),
            ("X-Noetl-Route", "r"),
            ("Host", "h"),
        ],
        message_id="d-1",
        principal="p",
        payload_from="message.json",
        drop=DROP,
        new_id=new_id,
    )
    assert pushed.payload == {"a": 1} and pushed.message.message_id == "d-1"
    assert pushed.message.headers == {"content-type": "application/json", "x-noetl-route": "r"}
    workload = pushed.workload()
    assert workload["payload"] == {"a": 1} and workload["message"]["id"] == "d-1"


def test_webhook_body_is_text_when_not_json_and_a_new_id_when_none() -> None:
    pushed = webhook_message(
        b"plain text", [], message_id=None, principal="p", payload_from="message.body", drop=DROP, new_id=new_id
    )
    assert pushed.payload == "plain text" and pushed.message.message_id.startswith("gen-")


def test_webhook_non_json_for_message_json_is_a_bad_message() -> None:
    with pytest.raises(BadMessage) as info:
        webhook_message(
            b"<xml/>", [], message_id=None, principal="p", payload_from="message.json", drop=DROP, new_id=new_id
        )
    assert info.value.code == "invalid_payload" and info.value.status == 400


def wrapped(data: bytes, **attributes: str) -> bytes:
    return json.dumps(
        {
            "message": {
                "data": base64.b64encode(data).decode(),
                "attributes": attributes,
                "messageId": "ps-9",
                "publishTime": "2026-11-22T00:00:00Z",
                "orderingKey": "dev-1",
            },
            "subscription": "projects/p/subscriptions/s",
            "deliveryAttempt": 2,
        }
    ).encode()


def test_pubsub_wrapped_envelope_uses_attributes_as_the_directive_channel() -> None:
    pushed = pubsub_message(
        wrapped(b'{"t": 21.5}', **{"X-Noetl-Pool": "iot", "traceparent": "tp"}),
        [("Authorization", "Bearer jwt"), ("x-noetl-pool", "from-http-must-not-count")],
        principal="sa@p",
        payload_from="message.json",
        drop=DROP,
        new_id=new_id,
    )
    assert pushed.payload == {"t": 21.5} and pushed.message.message_id == "ps-9"
    assert pushed.message.headers == {"x-noetl-pool": "iot", "traceparent": "tp"}
    assert (pushed.ordering_key, pushed.delivery_attempt, pushed.pubsub_subscription) == (
        "dev-1",
        2,
        "projects/p/subscriptions/s",
    )


def test_pubsub_unwrapped_reads_the_goog_headers() -> None:
    pushed = pubsub_message(
        b"raw-bytes",
        [("x-goog-pubsub-message-id", "u-1"), ("x-goog-pubsub-subscription-name", "s"), ("X-Noetl-Route", "r")],
        principal="sa",
        payload_from="message.body",
        drop=DROP,
        new_id=new_id,
    )
    assert pushed.message.message_id == "u-1" and pushed.payload == "raw-bytes"
    assert pushed.message.headers == {"x-noetl-route": "r"} and pushed.pubsub_subscription == "s"


def test_pubsub_bad_data_is_a_bad_message() -> None:
    with pytest.raises(BadMessage):
        pubsub_message(wrapped(b"not json"), [], principal="sa", payload_from="message.json", drop=DROP, new_id=new_id)
    bad_b64 = json.dumps({"message": {"data": "!!!", "messageId": "x"}}).encode()
    with pytest.raises(BadMessage):
        pubsub_message(bad_b64, [], principal="sa", payload_from="message.json", drop=DROP, new_id=new_id)


def test_pubsub_attributes_as_payload() -> None:
    pushed = pubsub_message(
        wrapped(b"", k="v"), [], principal="sa", payload_from="message.attributes", drop=DROP, new_id=new_id
    )
    assert pushed.payload == {"k": "v"}
