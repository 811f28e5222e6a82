"""Turning a verified push delivery into a message: id, headers (the directive channel), payload.

Webhooks: the message id is the scheme's delivery id or a new snowflake; the directive channel
is the request's headers, lowercased, with every credential header removed; the body is JSON when
it parses, else text. Pub/Sub push: the wrapped form (``{"message": {"data", "attributes",
"messageId", "publishTime", "orderingKey"}, "subscription", "deliveryAttempt"}``) carries its
directive channel in ``attributes``; the unwrapped form carries the raw data as the body and its
metadata in ``x-goog-pubsub-*`` headers.

Parsing happens only after verification (the caller's order); this module never sees an
unverified request.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from noetl_cloud import jsonsafe
from noetl_cloud.errors import BadRequest
from noetl_cloud.ingress.directives import HeaderValue, VerifiedMessage, normalize_headers, seal_verified

PUBSUB_META_HEADERS = (
    "x-goog-pubsub-message-id",
    "x-goog-pubsub-publish-time",
    "x-goog-pubsub-subscription-name",
    "x-goog-pubsub-ordering-key",
)
# Transport headers that are not the sender's data.
HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "accept-encoding",
        "user-agent",
        "transfer-encoding",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-cloud-trace-context",
    }
)


class BadMessage(BadRequest):
    """A delivery that can never succeed (its payload is not what the subscription expects);
    ``message_id`` is the delivery's id when it could be read (for the dead-letter record)."""

    code = "invalid_payload"
    message_id: str | None = None


@dataclass(frozen=True)
class PushMessage:
    message: VerifiedMessage
    payload: Any
    attributes: dict[str, str] = field(default_factory=dict)
    publish_time: str | None = None
    ordering_key: str | None = None
    delivery_attempt: int | None = None
    pubsub_subscription: str | None = None

    def workload(self) -> dict[str, Any]:
        """What the dispatched playbook receives: the payload and the message around it."""
        return {
            "payload": self.payload,
            "message": {
                "id": self.message.message_id,
                "source": self.message.source,
                "headers": self.message.headers,
                "attributes": self.attributes,
                "publish_time": self.publish_time,
                "ordering_key": self.ordering_key,
            },
        }


def _json(raw: bytes, what: str) -> Any:
    try:
        return jsonsafe.loads(raw, max_depth=jsonsafe.MAX_PAYLOAD_DEPTH)
    except jsonsafe.TooDeep:
        raise BadMessage(f"the {what} nests deeper than {jsonsafe.MAX_PAYLOAD_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError):
        raise BadMessage(f"the {what} is not JSON, and the subscription takes message.json") from None


def _text_or_json(raw: bytes) -> Any:
    """JSON when it parses (within the payload depth), else text, else base64."""
    try:
        return jsonsafe.loads(raw, max_depth=jsonsafe.MAX_PAYLOAD_DEPTH)
    except (UnicodeDecodeError, ValueError):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")


def webhook_message(
    body: bytes,
    header_pairs: Sequence[tuple[str, str]],
    *,
    message_id: str | None,
    principal: str,
    payload_from: str,
    drop: frozenset[str],
    new_id: Callable[[], str],
) -> PushMessage:
    headers = normalize_headers(header_pairs, drop=drop | HOP_HEADERS)
    if payload_from == "message.json":
        payload = _json(body, "body")
    elif payload_from == "message.attributes":
        payload = headers
    else:
        payload = _text_or_json(body)
    message = seal_verified(message_id or new_id(), "webhook", headers, principal)
    return PushMessage(message=message, payload=payload)


def pubsub_message(
    body: bytes,
    header_pairs: Sequence[tuple[str, str]],
    *,
    principal: str,
    payload_from: str,
    drop: frozenset[str],
    new_id: Callable[[], str],
) -> PushMessage:
    http_headers = normalize_headers(header_pairs, drop=drop | HOP_HEADERS)
    envelope = _wrapped(body)
    if envelope is not None:
        raw = envelope["message"]
        message_id = str(raw.get("messageId") or raw.get("message_id") or new_id())
        if not isinstance(raw.get("attributes") or {}, dict) or not isinstance(raw.get("data") or "", str):
            bad = BadMessage("message.attributes must be an object and message.data a base64 string")
            bad.message_id = message_id  # the dead-letter record names the message
            raise bad
        attributes = {str(k): str(v) for k, v in (raw.get("attributes") or {}).items()}
        try:
            data = base64.b64decode(raw.get("data") or "", validate=True)
        except (binascii.Error, ValueError):
            bad = BadMessage("message.data is not base64")
            bad.message_id = message_id  # the dead-letter record names the message
            raise bad from None
        publish_time, ordering_key = raw.get("publishTime"), raw.get("orderingKey") or None
        subscription, attempt = envelope.get("subscription"), envelope.get("deliveryAttempt")
        headers: dict[str, HeaderValue] = normalize_headers(attributes.items())
    else:
        data = body
        meta = {k: str(v) for k, v in http_headers.items() if k in PUBSUB_META_HEADERS}
        message_id = meta.get("x-goog-pubsub-message-id") or new_id()
        publish_time, ordering_key = meta.get("x-goog-pubsub-publish-time"), meta.get("x-goog-pubsub-ordering-key")
        subscription, attempt = meta.get("x-goog-pubsub-subscription-name"), None
        headers = {k: v for k, v in http_headers.items() if k not in PUBSUB_META_HEADERS}
        attributes = {k: v if isinstance(v, str) else v[-1] for k, v in headers.items()}
    if payload_from == "message.json":
        try:
            payload = _json(data, "message data")
        except BadMessage as exc:
            exc.message_id = message_id  # the dead-letter record names the message
            raise
    elif payload_from == "message.attributes":
        payload = attributes
    else:
        payload = _text_or_json(data)
    return PushMessage(
        message=seal_verified(message_id, "pubsub", headers, principal),
        payload=payload,
        attributes=attributes,
        publish_time=publish_time,
        ordering_key=ordering_key,
        delivery_attempt=int(attempt) if isinstance(attempt, int) else None,
        pubsub_subscription=subscription,
    )


def pubsub_message_id(body: bytes, header_pairs: Sequence[tuple[str, str]]) -> str | None:
    """The ``messageId`` of a Pub/Sub push delivery (wrapped or unwrapped), when it carries one."""
    envelope = _wrapped(body)
    if envelope is not None:
        value = envelope["message"].get("messageId") or envelope["message"].get("message_id")
        return str(value)[:256] if value else None
    return next((v[:256] for k, v in header_pairs if k.lower() == "x-goog-pubsub-message-id" and v), None)


def _wrapped(body: bytes) -> dict[str, Any] | None:
    """The wrapped push envelope, or None when the body is the unwrapped data itself."""
    try:
        parsed = jsonsafe.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    if (
        isinstance(parsed, dict)
        and isinstance(parsed.get("message"), dict)
        and ("data" in parsed["message"] or "messageId" in parsed["message"] or "attributes" in parsed["message"])
    ):
        return parsed
    return None
