"""The ingress service's replay protection around the forward: the delivery key it sends with the
start and what it answers when the control plane finds the key held (the claim itself:
tests/integration/test_control_execute.py, tests/e2e/test_edge_replay.py)."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from noetl_cloud.errors import Unavailable
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.observability import Counters
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


class Api:
    """Answers the forward with ``answer`` (``started`` or ``duplicate``) and keeps what it was sent."""

    def __init__(self, status: int = 202, answer: str = "started") -> None:
        self.status, self.answer, self.sent = status, answer, []  # type: list[Any]

    def post(self, path: str, json: Any = None) -> ApiResponse:
        self.sent.append(json)
        if self.status >= 500:
            raise Unavailable("down")
        return ApiResponse(self.status, {"execution_id": f"e{len(self.sent)}", "status": self.answer}, {})


def signed(body: bytes, msg_id: str, now: int) -> list[tuple[str, str]]:
    from standardwebhooks.webhooks import Webhook

    signature = Webhook(SECRET).sign(msg_id, datetime.fromtimestamp(now, UTC), body.decode())
    return [("webhook-id", msg_id), ("webhook-timestamp", str(now)), ("webhook-signature", signature)]


def service(api: Api, now: float, counters: Counters | None = None) -> IngressService:
    ids = itertools.count()
    return IngressService(
        directory=None,  # type: ignore[arg-type]
        api=api,  # type: ignore[arg-type]
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,
        counters=counters,
        clock=lambda: now,
    )


def test_the_start_carries_the_signed_id_as_its_delivery_key_for_the_replay_window() -> None:
    """The control plane claims the key with the start; ``tolerance_s`` (300 by default) + 60 s."""
    now, api = 1_800_000_000, Api()
    body = b'{"a": 1}'
    outcome = service(api, now).handle("hooks", CONFIG, body, signed(body, "msg_1", now))
    assert (outcome.status, outcome.http_status, outcome.execution_id) == ("accepted", 202, "e1")
    assert api.sent[0]["delivery"] == {"key": "hooks/msg_1", "window_secs": 360}
    assert api.sent[0]["parent_execution_id"] == "7"  # the key's scope is the listener's subscription


def test_a_start_the_control_plane_answers_duplicate_is_an_acknowledged_no_op() -> None:
    now, counters = 1_800_000_000, Counters()
    body = b'{"a": 1}'
    again = service(Api(answer="duplicate"), now, counters).handle("hooks", CONFIG, body, signed(body, "msg_1", now))
    assert (again.status, again.http_status, again.execution_id) == ("duplicate", 200, "e1")
    assert counters.value("ingress_replayed", listener="hooks") == 1
    assert counters.value("ingress_dispatched", listener="hooks") == 0


def test_a_failed_forward_is_refused_and_its_redelivery_is_forwarded_with_the_same_key() -> None:
    """The failed start committed nothing, its key neither: the redelivery runs."""
    now, body = 1_800_000_000, b'{"a": 1}'
    down, up = Api(status=503), Api()
    with pytest.raises(Unavailable):
        service(down, now).handle("hooks", CONFIG, body, signed(body, "msg_2", now))
    retry = service(up, now).handle("hooks", CONFIG, body, signed(body, "msg_2", now))
    assert retry.status == "accepted"
    assert down.sent[0]["delivery"] == up.sent[0]["delivery"] == {"key": "hooks/msg_2", "window_secs": 360}


def test_an_accepted_pubsub_push_is_answered_200_and_a_webhook_202() -> None:
    """The Pub/Sub emulator redelivers a push answered 202 again and again (it found by
    tests/e2e/test_faults.py): a delivery from a Pub/Sub push source is acknowledged with 200."""
    import json

    now = 1_800_000_000
    pubsub = {
        **CONFIG,
        "source": "pubsub",
        "verify": {"type": "bearer", "query_param": "token", "secret": "push-secret"},
    }
    envelope = {"message": {"data": base64.b64encode(b'{"a": 1}').decode(), "attributes": {}, "messageId": "ps-1"}}
    svc = service(Api(), now)
    pushed = svc.handle("hooks", pubsub, json.dumps(envelope).encode(), [], {"token": "push-secret"})
    assert (pushed.status, pushed.http_status) == ("accepted", 200)
    body = b'{"a": 1}'
    hooked = svc.handle("hooks", CONFIG, body, signed(body, "msg_4", now))
    assert (hooked.status, hooked.http_status) == ("accepted", 202)
