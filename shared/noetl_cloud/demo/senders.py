"""How the demo plays its sources: signed webhooks (signed with the ingress's own primitives,
:mod:`noetl_cloud.ingress.signatures`) and Pub/Sub messages through the official client."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from noetl_cloud.ingress import signatures as sig


def sign(scheme: str, secret: str, body: bytes, *, message_id: str, now: float | None = None) -> dict[str, str]:
    """The credential headers a sender of ``scheme`` puts on ``body``."""
    if scheme == "hmac_sha256":
        return {"X-Signature": "sha256=" + sig.hmac_sha256(secret.encode("utf-8"), body).hex()}
    if scheme == "github":
        return {
            "X-Hub-Signature-256": "sha256=" + sig.hmac_sha256(secret.encode("utf-8"), body).hex(),
            "X-GitHub-Delivery": message_id,
            "X-GitHub-Event": "push",
        }
    if scheme == "standard_webhooks":
        key = sig.standard_webhooks_key(secret)
        if key is None:
            raise ValueError("the standard_webhooks secret is not base64 after whsec_")
        timestamp = str(int(now if now is not None else time.time()))
        digest = sig.hmac_sha256(key, message_id.encode("utf-8"), f".{timestamp}.".encode("ascii"), body)
        return {
            "webhook-id": message_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": "v1," + base64.b64encode(digest).decode("ascii"),
        }
    raise ValueError(f"no signer for {scheme!r}")


@dataclass
class Delivery:
    """One webhook sent: what the ingress answered."""

    scheme: str
    message_id: str
    batch: str
    status: int
    outcome: str  # accepted | spooled | duplicate | error code
    execution_id: str | None


def send_webhook(
    http: urllib3.PoolManager, ingress_url: str, listener: str, scheme: str, secret: str, payload: Mapping[str, Any]
) -> Delivery:
    """POST one signed JSON delivery to ``/ingress/<listener>``."""
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    message_id = f"msg-{uuid.uuid4().hex[:16]}"
    headers = {"Content-Type": "application/json", **sign(scheme, secret, body, message_id=message_id)}
    response = http.request("POST", f"{ingress_url}/ingress/{listener}", body=body, headers=headers, timeout=30.0)
    try:
        answer = json.loads(response.data)
    except ValueError:
        answer = {}
    error = answer.get("error") if isinstance(answer, dict) else None
    outcome = str(error.get("code")) if isinstance(error, dict) else str(answer.get("status", response.status))
    return Delivery(
        scheme=scheme,
        message_id=message_id,
        batch=str(payload["batch"]),
        status=response.status,
        outcome=outcome,
        execution_id=answer.get("execution_id") if isinstance(answer, dict) else None,
    )


def publish(project_id: str, topic: str, emulator_host: str, payloads: list[dict[str, Any]]) -> list[str]:
    """Publish each payload as one JSON message (official client, the emulator), its ``batch`` as
    its idempotency key (``x-idempotency-key``); their message ids."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from noetl_cloud.demo.setup import emulator

    with emulator(emulator_host):
        publisher = pubsub_v1.PublisherClient()
        path = publisher.topic_path(project_id, topic)
        futures = [
            publisher.publish(
                path,
                json.dumps(p, separators=(",", ":")).encode("utf-8"),
                source="noetl-demo",
                **{"x-idempotency-key": str(p["batch"])},
            )
            for p in payloads
        ]
        ids = [str(f.result(timeout=30)) for f in futures]
        publisher.stop()
    return ids
