"""Push ingress end to end: signed deliveries through the ingress role into executions.

For each scheme: 6 signed deliveries, 2 of them redirected by allowlisted headers -> 6 x 202, 6
executions on the right playbook and pool carrying the caller's traceparent, 2
directives_applied events; then a tampered and an unsigned delivery, both carrying the redirect
header -> 401, and nothing new in the event log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
import urllib3
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import create_engine, text
from standardwebhooks.webhooks import Webhook

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import role_group
from tests.integration.control_fixtures import TOKEN, Topics, events_topic_for, playbook

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HMAC_SECRET = "hmac-shared-secret"
SW_SECRET = "whsec_" + base64.b64encode(b"standard-webhooks-secret-bytes!!").decode()
STRIPE_SECRET = "whsec_stripe_test_secret"
BEARER_SECRET = "bearer-token-value"
SA = "pubsub-push@noetl-local.iam.gserviceaccount.com"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Jwks(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def jwks_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks"
    server.shutdown()


def subscription(scheme: str, jwks_url: str) -> tuple[str, str]:
    verify = {
        "hmac_sha256": "{type: hmac_sha256, header: x-signature, secret: hmac_secret}",
        "standard_webhooks": "{type: standard_webhooks, secret: sw_secret}",
        "stripe": "{type: stripe, secret: stripe_secret}",
        "bearer": "{type: bearer, secret: bearer_secret}",
        "pubsub_oidc": f"{{type: pubsub_oidc, audience: 'https://ingress.test/ingress/hooks', "
        f"service_account: {SA}, jwks_url: '{jwks_url}'}}",
    }[scheme]
    source = "pubsub" if scheme == "pubsub_oidc" else "webhook"
    return (
        source,
        f"""\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: hooks, path: subscriptions/hooks}}
spec:
  source: {source}
  mode: push
  ingress:
    gateway_path: /ingress/hooks
    verify: {verify}
  dispatch: {{playbook: domain/handle, payload_from: message.json, execution_pool: shared}}
  headers:
    directives:
      - {{header: x-noetl-route, controls: dispatch.playbook, allowed: [domain/handle, domain/fraud]}}
      - {{header: x-noetl-pool, controls: dispatch.execution_pool, allowed: [shared, iot]}}
    trace: {{propagate: w3c}}
""",
    )


def sign(scheme: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    """The headers of a correctly signed delivery of ``body``."""
    now = int(time.time())
    if scheme == "hmac_sha256":
        return {**headers, "X-Signature": hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()}
    if scheme == "standard_webhooks":
        msg_id = f"msg_{secrets.token_hex(8)}"
        signature = Webhook(SW_SECRET).sign(msg_id, datetime.fromtimestamp(now, UTC), body.decode())
        return {**headers, "webhook-id": msg_id, "webhook-timestamp": str(now), "webhook-signature": signature}
    if scheme == "stripe":
        digest = hmac.new(STRIPE_SECRET.encode(), f"{now}.".encode() + body, hashlib.sha256).hexdigest()
        return {**headers, "Stripe-Signature": f"t={now},v1={digest}"}
    if scheme == "bearer":
        return {**headers, "Authorization": f"Bearer {BEARER_SECRET}"}
    claims = {
        "iss": "https://accounts.google.com",
        "aud": "https://ingress.test/ingress/hooks",
        "email": SA,
        "email_verified": True,
        "sub": "1234",
        "iat": now,
        "exp": now + 600,
    }
    token = jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})
    return {**headers, "Authorization": f"Bearer {token}"}


def delivery(scheme: str, n: int, directives: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """Body and unsigned headers; Pub/Sub push carries its directives in message attributes."""
    payload = json.dumps({"n": n}).encode()
    headers = {"traceparent": TRACEPARENT, **directives}
    if scheme != "pubsub_oidc":
        return payload, {"Content-Type": "application/json", **headers}
    body = json.dumps(
        {
            "message": {
                "data": base64.b64encode(payload).decode(),
                "attributes": headers,
                "messageId": f"ps-{secrets.token_hex(6)}",
                "publishTime": "2026-11-22T00:00:00Z",
            },
            "subscription": "projects/noetl-local/subscriptions/hooks-push",
        }
    ).encode()
    return body, {"Content-Type": "application/json"}


@pytest.fixture
def stack(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics
) -> Iterator[Callable[..., Any]]:
    env = {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": topic_prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(topic_prefix),
        "NOETL_POOLS": "shared,iot",
        # Coordination state of this test's own (the spool's circuit). The replay keys are claimed in
        # this test's fresh database, so another scheme's {"n": 0..5} never answers duplicate here.
        "NOETL_KV_COLLECTION": f"push-{secrets.token_hex(4)}",
        "NOETL_SECRET_HMAC_SECRET": HMAC_SECRET,
        "NOETL_SECRET_SW_SECRET": SW_SECRET,
        "NOETL_SECRET_STRIPE_SECRET": STRIPE_SECRET,
        "NOETL_SECRET_BEARER_SECRET": BEARER_SECRET,
    }
    with role_group(("execute", env), ("ingress", lambda urls: {**env, "NOETL_API_URL": urls["execute"]})) as urls:
        yield lambda: (urls["execute"], urls["ingress"])


def counts(database_url: str) -> dict[str, Any]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            executions = conn.execute(
                text(
                    "SELECT path, execution_pool, trace->>'traceparent' AS tp, meta FROM execution ORDER BY created_at"
                )
            ).all()
            applied = conn.execute(
                text("SELECT count(*) FROM event WHERE event_type = 'subscription.message.directives_applied'")
            ).scalar_one()
            rejected = (
                conn.execute(
                    text("SELECT payload->>'reason' FROM event WHERE event_type = 'subscription.message.rejected'")
                )
                .scalars()
                .all()
            )
        return {"executions": executions, "applied": applied, "rejected": rejected}
    finally:
        engine.dispose()


def tampered_headers(scheme: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    """Credentials that look right but are not: signed for another body, or a wrong/forged token."""
    if scheme == "bearer":  # a bearer token signs nothing: present a wrong one
        return {**headers, "Authorization": "Bearer not-the-token"}
    if scheme == "pubsub_oidc":  # the token signs no body either: the right claims under a forged key
        claims = jwt.decode(sign(scheme, body, headers)["Authorization"][7:], options={"verify_signature": False})
        forged_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return {
            **headers,
            "Authorization": f"Bearer {jwt.encode(claims, forged_key, algorithm='RS256', headers={'kid': 'k1'})}",
        }
    return sign(scheme, body.replace(b"99", b"98"), headers)


@pytest.mark.parametrize("scheme", ["hmac_sha256", "standard_webhooks", "stripe", "bearer", "pubsub_oidc"])
def test_signed_deliveries_run_and_unsigned_ones_cannot_steer(
    scheme: str, stack: Callable[..., Any], database_url: str, jwks_url: str, topics: Topics
) -> None:
    api_url, ingress_url = stack()
    _source, content = subscription(scheme, jwks_url)
    with ApiClient(api_url, token_source=static_token(TOKEN)) as api:
        for path in ("domain/handle", "domain/fraud"):
            api.post("/api/catalog", json={"content": playbook(path)}).raise_for_error()
        api.post("/api/catalog", json={"content": content}).raise_for_error()
        sid = (
            api.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"})
            .raise_for_error()
            .json["subscription_id"]
        )
        api.post(f"/api/subscriptions/{sid}/activate").raise_for_error()

    http = urllib3.PoolManager()
    redirect = {"x-noetl-route": "domain/fraud", "x-noetl-pool": "iot"}
    statuses = []
    for n in range(6):
        body, headers = delivery(scheme, n, redirect if n in (1, 4) else {})
        response = http.request("POST", f"{ingress_url}/ingress/hooks", body=body, headers=sign(scheme, body, headers))
        statuses.append((response.status, json.loads(response.data)["status"]))
    acked = 200 if scheme == "pubsub_oidc" else 202  # a Pub/Sub push is acknowledged with 200 (docs/ingress.md)
    assert statuses == [(acked, "accepted")] * 6

    seen = counts(database_url)
    routes = sorted((path, pool) for path, pool, _tp, _meta in seen["executions"])
    assert routes == [("domain/fraud", "iot")] * 2 + [("domain/handle", "shared")] * 4
    assert {tp for _p, _pool, tp, _m in seen["executions"]} == {TRACEPARENT}
    assert all(meta["listener"] == "hooks" and meta["message_id"] for *_x, meta in seen["executions"])
    assert seen["applied"] == 2
    assert len(topics.pull("iot", 2)) == 2 and len(topics.pull("shared", 4)) == 4

    # A tampered delivery and an unsigned one, both trying to redirect.
    body, headers = delivery(scheme, 99, redirect)
    tampered = http.request(
        "POST", f"{ingress_url}/ingress/hooks", body=body, headers=tampered_headers(scheme, body, headers)
    )
    unsigned = http.request("POST", f"{ingress_url}/ingress/hooks", body=body, headers=headers)
    assert (tampered.status, unsigned.status) == (401, 401)
    assert json.loads(unsigned.data)["error"]["code"] in ("missing_signature", "missing_token")
    after = counts(database_url)
    assert len(after["executions"]) == 6 and after["applied"] == 2
    assert after["rejected"], "rejections are audited"


def test_unknown_listener_is_404_and_oversized_bodies_are_413(stack: Callable[..., Any], jwks_url: str) -> None:
    api_url, ingress_url = stack()
    with ApiClient(api_url, token_source=static_token(TOKEN)) as api:
        api.post("/api/catalog", json={"content": playbook("domain/handle")}).raise_for_error()
        api.post("/api/catalog", json={"content": playbook("domain/fraud")}).raise_for_error()
        api.post("/api/catalog", json={"content": subscription("hmac_sha256", jwks_url)[1]}).raise_for_error()
        sid = api.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).json["subscription_id"]
        api.post(f"/api/subscriptions/{sid}/activate").raise_for_error()
    http = urllib3.PoolManager()
    unknown = http.request("POST", f"{ingress_url}/ingress/nobody", body=b"{}")
    assert unknown.status == 404 and json.loads(unknown.data)["error"]["code"] == "unknown_listener"
    big = http.request("POST", f"{ingress_url}/ingress/hooks", body=b"x" * (1024 * 1024 + 1))
    assert big.status == 413
