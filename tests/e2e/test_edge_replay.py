"""Replayed deliveries on the local stack (issue #21 item 3): the same signed delivery twice runs once
in every scheme, keyed on what the scheme signs; ``hmac_sha256`` and ``bearer`` on the body digest by
default, for the listener's replay window, with ``verify.replay: none`` as the opt-out.

The execute and ingress roles run as their deployables do, on a fresh database and a Firestore
collection of the test's own (the fixtures of ``test_edge_hardening``)."""

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
from noetl_cloud.web.client import ApiClient, static_token
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
from tests.integration.control_fixtures import TOKEN, Topics


@pytest.fixture
def kv_collection() -> str:
    """A Firestore collection of this test's own: its replay windows start empty, whatever ran before."""
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

    # The replay key lives in the coordination store (Firestore), for the listener's replay window.
    from noetl_cloud.ingress.replay import body_digest
    from noetl_cloud.kv.firestore import FirestoreKeyValueStore

    key = f"ingress/seen/mac/{body_digest(body)}"
    project, emulator = local_env.get("NOETL_PROJECT_ID", "noetl-local"), local_env["FIRESTORE_EMULATOR_HOST"]
    seen = FirestoreKeyValueStore(project, collection=kv_collection, emulator_host=emulator).get(key)
    assert seen is not None and seen.value["state"] == "accepted"
    assert seen.expires_at is not None
    assert sent_at + timedelta(seconds=899) <= seen.expires_at <= datetime.now(UTC) + timedelta(seconds=901)

    # The window's end, without waiting for it: the ingress service on the same store and control
    # plane, its store's clock moved past the entry's expiry, takes the same delivery as new.
    from noetl_cloud.ingress.listeners import ListenerDirectory
    from noetl_cloud.ingress.service import IngressService

    clock = [datetime.now(UTC)]
    store = FirestoreKeyValueStore(project, collection=kv_collection, emulator_host=emulator, clock=lambda: clock[0])
    with ApiClient(api_url, token_source=static_token(TOKEN)) as api:
        ingress = IngressService(ListenerDirectory(api), api, store, new_id=lambda: "1", jwks_for=lambda _url: None)
        config = ingress.config("mac")
        signature = [("X-Signature", hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest())]
        assert ingress.handle("mac", config, body, signature).status == "duplicate"  # the role's entry, seen
        clock[0] = seen.expires_at + timedelta(seconds=1)
        assert ingress.handle("mac", config, body, signature).status == "accepted"
    assert len(executions(database_url)) == 6
