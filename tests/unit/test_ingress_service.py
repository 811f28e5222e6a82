"""The ingress service's replay protection around the forward, with in-memory adapters."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from noetl_cloud.errors import Unavailable
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.web.client import ApiResponse

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
CONFIG: dict[str, Any] = {
    "listener": "hooks",
    "path": "subscriptions/hooks",
    "subscription_id": "7",
    "state": "active",
    "source": "webhook",
    "verify": {"type": "standard_webhooks", "secret": SECRET},
    "dispatch": {"playbook": "domain/handle", "payload_from": "message.json"},
    "headers": {},
    "dedup": {},
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Api:
    """Answers the forward; a hook runs while it is in flight."""

    def __init__(self, status: int = 202, during: Any = None) -> None:
        self.status, self.during, self.calls = status, during, 0

    def post(self, path: str, json: Any = None) -> ApiResponse:
        self.calls += 1
        if self.during:
            self.during()
        if self.status >= 500:
            raise Unavailable("down")
        return ApiResponse(self.status, {"execution_id": f"e{self.calls}"}, {})


def signed(body: bytes, msg_id: str, now: int) -> list[tuple[str, str]]:
    from standardwebhooks.webhooks import Webhook

    signature = Webhook(SECRET).sign(msg_id, datetime.fromtimestamp(now, UTC), body.decode())
    return [("webhook-id", msg_id), ("webhook-timestamp", str(now)), ("webhook-signature", signature)]


def service(api: Api, kv: InMemoryKeyValueStore, now: float) -> IngressService:
    ids = itertools.count()
    return IngressService(
        directory=None,  # type: ignore[arg-type]
        api=api,  # type: ignore[arg-type]
        kv=kv,
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,
        clock=lambda: now,
    )


def test_a_redelivery_after_success_is_an_acknowledged_no_op() -> None:
    clock, now = Clock(), 1_800_000_000
    kv, api = InMemoryKeyValueStore(clock=clock), Api()
    svc, body = service(api, kv, now), b'{"a": 1}'
    first = svc.handle("hooks", CONFIG, body, signed(body, "msg_1", now))
    again = svc.handle("hooks", CONFIG, body, signed(body, "msg_1", now))
    assert (first.status, again.status, again.http_status) == ("accepted", "duplicate", 200)
    assert again.execution_id == first.execution_id and api.calls == 1


def test_a_failed_forward_releases_the_claim_so_the_redelivery_runs() -> None:
    clock, now = Clock(), 1_800_000_000
    kv, body = InMemoryKeyValueStore(clock=clock), b'{"a": 1}'
    with pytest.raises(Unavailable):
        service(Api(status=503), kv, now).handle("hooks", CONFIG, body, signed(body, "msg_2", now))
    retry = service(Api(), kv, now).handle("hooks", CONFIG, body, signed(body, "msg_2", now))
    assert retry.status == "accepted"


def test_a_claim_that_expires_during_a_slow_forward_does_not_fail_the_accepted_delivery() -> None:
    clock, now = Clock(), 1_800_000_000
    kv, body = InMemoryKeyValueStore(clock=clock), b'{"a": 1}'

    def slow() -> None:
        clock.now += timedelta(seconds=120)  # past the claim's lifetime

    outcome = service(Api(during=slow), kv, now).handle("hooks", CONFIG, body, signed(body, "msg_3", now))
    assert outcome.status == "accepted" and outcome.http_status == 202


def test_an_accepted_pubsub_push_is_answered_200_and_a_webhook_202() -> None:
    """The Pub/Sub emulator redelivers a push answered 202 again and again (it found by
    tests/e2e/test_faults.py): a delivery from a Pub/Sub push source is acknowledged with 200."""
    import json

    clock, now = Clock(), 1_800_000_000
    pubsub = {
        **CONFIG,
        "source": "pubsub",
        "verify": {"type": "bearer", "query_param": "token", "secret": "push-secret"},
    }
    envelope = {"message": {"data": base64.b64encode(b'{"a": 1}').decode(), "attributes": {}, "messageId": "ps-1"}}
    svc = service(Api(), InMemoryKeyValueStore(clock=clock), now)
    pushed = svc.handle("hooks", pubsub, json.dumps(envelope).encode(), [], {"token": "push-secret"})
    assert (pushed.status, pushed.http_status) == ("accepted", 200)
    body = b'{"a": 1}'
    hooked = svc.handle("hooks", CONFIG, body, signed(body, "msg_4", now))
    assert (hooked.status, hooked.http_status) == ("accepted", 202)
