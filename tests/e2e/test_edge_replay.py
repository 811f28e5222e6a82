"""Replayed deliveries on the local stack (issue #21 item 3): the same signed delivery twice runs once
in every scheme, keyed on what the scheme signs; ``hmac_sha256`` and ``bearer`` on the body digest by
default, for the listener's replay window, with ``verify.replay: none`` as the opt-out.

The execute and ingress roles run as their deployables do, on a fresh database (where the control
plane claims each delivery's key with its start) and a Firestore collection of the test's own (the
fixtures of ``test_edge_hardening``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.local.process import wait_until
from tests.e2e.telemetry_files import metric_total
from tests.e2e.test_edge_hardening import (
    BEARER,
    GITHUB_SECRET,
    HTTP,
    edge_roles,
    executions,
    listener_yaml,
    register,
)
from tests.e2e.test_ingress_push import BEARER_SECRET, HMAC_SECRET, STRIPE_SECRET
from tests.integration.control_fixtures import Topics


@pytest.fixture
def kv_collection() -> str:
    """A Firestore collection of this test's own (the spool's circuit state), whatever ran before."""
    return f"replay-{secrets.token_hex(4)}"


@pytest.fixture
def stack(
    database_url: str,
    local_env: dict[str, str],
    topic_prefix: str,
    topics: Topics,
    tmp_path: Path,
    kv_collection: str,
) -> Iterator[Callable[[], tuple[str, str]]]:
    with edge_roles(database_url, local_env, topic_prefix, tmp_path, kv_collection) as urls:
        yield urls


def test_the_same_signed_delivery_twice_runs_once_in_every_scheme(stack: Callable[..., Any], database_url: str) -> None:
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml("pay", "{type: stripe, secret: stripe_secret}"),
        listener_yaml("gh", "{type: github, secret: github_secret}"),
        listener_yaml("mac", "{type: hmac_sha256, header: x-signature, secret: hmac_secret}"),  # no dedup: by default
        listener_yaml("orders", "{type: bearer, query_param: token, secret: bearer_secret}", source="pubsub"),
    )
    now = int(time.time())
    stripe_body = json.dumps({"id": "evt_1", "type": "charge.succeeded"}).encode()
    stripe_sig = hmac.new(STRIPE_SECRET.encode(), f"{now}.".encode() + stripe_body, hashlib.sha256).hexdigest()
    gh_body = b'{"action": "opened"}'
    gh_sig = "sha256=" + hmac.new(GITHUB_SECRET.encode(), gh_body, hashlib.sha256).hexdigest()
    mac_body = b'{"n": 1}'
    mac_sig = hmac.new(HMAC_SECRET.encode(), mac_body, hashlib.sha256).hexdigest()
    push = json.dumps({"message": {"data": base64.b64encode(b"{}").decode(), "messageId": "ps-7"}}).encode()
    for attempt in range(2):
        answers = [
            HTTP.request(
                "POST",
                f"{ingress_url}/ingress/pay",
                body=stripe_body,
                headers={"Stripe-Signature": f"t={now},v1={stripe_sig}"},
            ),
            HTTP.request(
                "POST",
                f"{ingress_url}/ingress/gh",
                body=gh_body,
                headers={"X-Hub-Signature-256": gh_sig, "X-GitHub-Delivery": f"fresh-{attempt}"},
            ),
            HTTP.request("POST", f"{ingress_url}/ingress/mac", body=mac_body, headers={"X-Signature": mac_sig}),
            HTTP.request("POST", f"{ingress_url}/ingress/orders?token={BEARER_SECRET}", body=push),
        ]
        assert all(a.status in (200, 202) for a in answers), [(a.status, a.data) for a in answers]
    listeners = sorted(meta["listener"] for _path, meta in executions(database_url))
    assert listeners == ["gh", "mac", "orders", "pay"]


def test_hmac_and_bearer_deliveries_replay_as_duplicates_within_the_window(
    stack: Callable[..., Any], database_url: str, local_env: dict[str, str], kv_collection: str, tmp_path: Path
) -> None:
    """hmac_sha256 and bearer sign no id: the body digest is the replay key by default (#21 item 3),
    for ``replay_window_s`` (or ``tolerance_s`` + 60 s); ``replay: none`` lets equal bodies run."""
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml("mac", "{type: hmac_sha256, header: x-signature, secret: hmac_secret, replay_window_s: 900}"),
        listener_yaml("tok", "{type: bearer, secret: bearer_secret}"),
        listener_yaml("ping", "{type: hmac_sha256, header: x-signature, secret: hmac_secret, replay: none}"),
    )

    def mac(listener: str, body: bytes) -> Any:
        signature = hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()
        return HTTP.request("POST", f"{ingress_url}/ingress/{listener}", body=body, headers={"X-Signature": signature})

    def answer(response: Any) -> tuple[int, str, str | None]:
        data = json.loads(response.data)
        return response.status, data.get("status"), data.get("execution_id")

    body, other = b'{"order": 1}', b'{"order": 2}'
    sent_at = datetime.now(UTC)
    first, again, different = answer(mac("mac", body)), answer(mac("mac", body)), answer(mac("mac", other))
    assert first[:2] == (202, "accepted") and different[:2] == (202, "accepted")
    assert again == (200, "duplicate", first[2])  # answered as every scheme answers a replay
    tok = [answer(HTTP.request("POST", f"{ingress_url}/ingress/tok", body=body, headers=BEARER)) for _ in range(2)]
    assert [t[:2] for t in tok] == [(202, "accepted"), (200, "duplicate")] and tok[1][2] == tok[0][2]
    assert [answer(mac("ping", body))[:2] for _ in range(2)] == [(202, "accepted")] * 2
    listeners = sorted(meta["listener"] for _path, meta in executions(database_url))
    assert listeners == ["mac", "mac", "ping", "ping", "tok"]
    assert wait_until(lambda: metric_total(tmp_path, "noetl.ingress_replayed") == 2, timeout=30)

    # The replay key is claimed with the start, in PostgreSQL, for the listener's replay window: one
    # row per key, scoped to the listener's subscription.
    from sqlalchemy import create_engine, text

    from noetl_cloud.db.engine import normalize_url
    from noetl_cloud.ingress.replay import body_digest

    engine = create_engine(normalize_url(database_url))
    key = f"mac/{body_digest(body)}"
    with engine.connect() as conn:
        seen = conn.execute(
            text("SELECT scope, expires_at FROM subscription_dedup WHERE dedup_key = :key"), {"key": key}
        ).one()
    assert seen.scope.startswith("delivery/")
    assert sent_at + timedelta(seconds=899) <= seen.expires_at <= datetime.now(UTC) + timedelta(seconds=901)

    # The window's end, without waiting for it: the key's expiry moved into the past, the same
    # delivery runs again.
    assert answer(mac("mac", body))[:2] == (200, "duplicate")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE subscription_dedup SET expires_at = now() - interval '1 second' WHERE dedup_key = :key"),
            {"key": key},
        )
    assert answer(mac("mac", body))[:2] == (202, "accepted")
    engine.dispose()
    assert len(executions(database_url)) == 6
