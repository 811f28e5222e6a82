"""The public edge under hostile input, on the local stack (issue #21): the execute and ingress roles
run as their deployables do (gunicorn), against the stack's PostgreSQL and emulators.

Each test names the symptom it proves gone: listener aliases from the URL, bodies cut at a limit,
non-ASCII and large bodies that could not be forwarded, repeated directive headers, input that
answered 500.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import urllib3
from sqlalchemy import create_engine, text
from standardwebhooks.webhooks import Webhook

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.process import wait_until
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import role_group
from tests.e2e.telemetry_files import metric_points, metric_total, metrics_env
from tests.e2e.test_ingress_push import BEARER_SECRET, HMAC_SECRET, STRIPE_SECRET, SW_SECRET
from tests.integration.control_fixtures import TOKEN, Topics, events_topic_for, playbook

HTTP = urllib3.PoolManager(retries=False)
GITHUB_SECRET = "github-shared-secret"


@pytest.fixture
def kv_collection() -> str:
    """A Firestore collection of this test's own: its replay windows start empty, whatever ran before."""
    return f"edge-{secrets.token_hex(4)}"


@contextmanager
def edge_roles(
    database_url: str, local_env: dict[str, str], topic_prefix: str, tmp_path: Path, kv_collection: str
) -> Iterator[Callable[[], tuple[str, str]]]:
    """The execute and ingress roles on a fresh database and replay store, their metrics to the
    local exporter under ``tmp_path``; what it gives, called, is their base URLs."""
    env = {
        **local_env,
        **metrics_env(tmp_path),
        "NOETL_KV_COLLECTION": kv_collection,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": topic_prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(topic_prefix),
        "NOETL_POOLS": "shared,iot",
        "NOETL_SECRET_HMAC_SECRET": HMAC_SECRET,
        "NOETL_SECRET_SW_SECRET": SW_SECRET,
        "NOETL_SECRET_BEARER_SECRET": BEARER_SECRET,
        "NOETL_SECRET_STRIPE_SECRET": STRIPE_SECRET,
        "NOETL_SECRET_GITHUB_SECRET": GITHUB_SECRET,
    }
    with role_group(("execute", env), ("ingress", lambda urls: {**env, "NOETL_API_URL": urls["execute"]})) as urls:
        yield lambda: (urls["execute"], urls["ingress"])


@pytest.fixture
def stack(
    database_url: str,
    local_env: dict[str, str],
    topic_prefix: str,
    topics: Topics,
    tmp_path: Path,
    kv_collection: str,
) -> Iterator[Callable[[], tuple[str, str]]]:
    """:func:`edge_roles` for one test."""
    with edge_roles(database_url, local_env, topic_prefix, tmp_path, kv_collection) as urls:
        yield urls


def listener_yaml(
    name: str,
    verify: str,
    *,
    source: str = "webhook",
    ingress: str = "",
    headers: str = "",
    payload_from: str = "message.json",
    extra: str = "",
) -> str:
    return f"""\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: {name}, path: subscriptions/{name}}}
spec:
  source: {source}
  mode: push
  ingress:
    gateway_path: /ingress/{name}
    verify: {verify}
{ingress}  dispatch: {{playbook: domain/handle, payload_from: {payload_from}, execution_pool: shared}}
  headers:
    directives:
      - {{header: x-noetl-route, controls: dispatch.playbook, allowed: [domain/handle, domain/fraud]}}
{headers}{extra}"""


def register(api_url: str, *documents: str) -> None:
    """Register the playbooks, then each subscription document, and activate it."""
    with ApiClient(api_url, token_source=static_token(TOKEN)) as api:
        for path in ("domain/handle", "domain/fraud"):
            api.post("/api/catalog", json={"content": playbook(path)}).raise_for_error()
        for document in documents:
            path = api.post("/api/catalog", json={"content": document}).raise_for_error().json["path"]
            sid = api.post("/api/subscriptions/register", json={"path": path}).raise_for_error()
            api.post(f"/api/subscriptions/{sid.json['subscription_id']}/activate").raise_for_error()


def rows(database_url: str, sql: str) -> list[Any]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql)).all())
    finally:
        engine.dispose()


def executions(database_url: str) -> list[Any]:
    return rows(database_url, "SELECT path, meta FROM execution ORDER BY created_at")


def standard_webhook(body: bytes) -> dict[str, str]:
    msg_id = f"msg_{secrets.token_hex(8)}"
    signature = Webhook(SW_SECRET).sign(msg_id, datetime.fromtimestamp(int(time.time()), UTC), body.decode())
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(time.time())),
        "webhook-signature": signature,
    }


def error_code(response: Any) -> str:
    return str(json.loads(response.data)["error"]["code"])


# -- 1. listener names from the URL -------------------------------------------------------------


ALIASES = ("hooks%3Fx", "hooks%3F", "hooks%23x", "hooks%20x", "hooks%0D%0Ax", "hooks%2Fx", "Hooks", "hooks%00")


def test_a_segment_that_is_no_listener_name_is_404_and_a_signed_delivery_runs_once(
    stack: Callable[..., Any], database_url: str, tmp_path: Path
) -> None:
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml(
            "hooks",
            "{type: standard_webhooks, secret: sw_secret}",
            ingress="    rate_limit: {per_sec: 1000, burst: 1000}\n",
        ),
    )
    body = json.dumps({"n": 1}).encode()
    headers = standard_webhook(body)
    first = HTTP.request("POST", f"{ingress_url}/ingress/hooks", body=body, headers=headers)
    assert first.status == 202, first.data

    for alias in ALIASES:  # the captured delivery replayed under every alias of the name
        answer = HTTP.request("POST", f"{ingress_url}/ingress/{alias}", body=body, headers=headers)
        assert answer.status == 404, (alias, answer.status, answer.data)
        assert error_code(answer) == "not_found"
        unsigned = HTTP.request("POST", f"{ingress_url}/ingress/{alias}", body=b"{}")
        assert unsigned.status == 404, (alias, unsigned.status)
    again = HTTP.request("POST", f"{ingress_url}/ingress/hooks", body=body, headers=headers)
    assert (again.status, json.loads(again.data)["status"]) == (200, "duplicate")
    assert len(executions(database_url)) == 1

    # The public edge serves no metrics (#21 item 8); its counters, exported through OpenTelemetry,
    # carry the canonical name only, whatever alias a request used.
    assert HTTP.request("GET", f"{ingress_url}/metrics").status == 404

    def labels() -> set[str]:
        points = metric_points(tmp_path, "noetl.ingress_received") + metric_points(tmp_path, "noetl.ingress_replayed")
        return {p["attributes"].get("listener") for p in points}

    assert wait_until(
        lambda: labels() == {"hooks"} and metric_total(tmp_path, "noetl.ingress_replayed") == 1, timeout=30
    )
    assert labels() == {"hooks"}

    # The control plane's listener routes refuse the same aliases (404, not 405 or another listener).
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for alias in ALIASES:
        config = HTTP.request("GET", f"{api_url}/api/internal/ingress/{alias}", headers=auth)
        assert config.status == 404, (alias, config.status)
        audit = HTTP.request(
            "POST",
            f"{api_url}/api/internal/ingress/{alias}/audit",
            body=json.dumps({"event_type": "subscription.message.rejected", "payload": {"reason": "x"}}),
            headers={**auth, "Content-Type": "application/json"},
        )
        assert audit.status == 404, (alias, audit.status)


# -- 2. bodies ----------------------------------------------------------------------------------

BEARER = {"Authorization": f"Bearer {BEARER_SECRET}"}


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_chunked_body_over_the_listener_limit_is_413_and_runs_nothing(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml(
            "small",
            "{type: bearer, secret: bearer_secret}",
            ingress="    max_body_bytes: 4096\n",
            payload_from="message.body",
        ),
    )
    url = f"{ingress_url}/ingress/small"
    fits = HTTP.request("POST", url, body=chunks(b"a" * 4096, 1000), headers=BEARER, chunked=True)
    assert fits.status == 202, fits.data
    over = HTTP.request("POST", url, body=chunks(b"b" * 4097, 1000), headers=BEARER, chunked=True)
    assert over.status == 413 and error_code(over) == "payload_too_large"
    far_over = HTTP.request("POST", url, body=chunks(b"c" * 40_000, 1000), headers=BEARER, chunked=True)
    assert far_over.status == 413
    payloads = rows(database_url, "SELECT workload->'payload' FROM execution")
    assert [row[0] for row in payloads] == ["a" * 4096]


def test_a_chunked_catalog_document_over_the_limit_is_413_and_nothing_is_stored(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, _ingress_url = stack()
    document = playbook("domain/long") + "# " + "x" * (1024 * 1024) + "\n"
    answer = HTTP.request(
        "POST",
        f"{api_url}/api/catalog",
        body=chunks(document.encode()),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"},
        chunked=True,
    )
    assert answer.status == 413 and error_code(answer) == "payload_too_large"
    assert rows(database_url, "SELECT path FROM catalog") == []


def test_non_ascii_and_large_bodies_within_the_listener_limit_are_forwarded(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml("words", "{type: bearer, secret: bearer_secret}"),
        listener_yaml("bulk", "{type: bearer, secret: bearer_secret}", ingress="    max_body_bytes: 32MiB\n"),
    )
    words = json.dumps({"text": "é€" * 150_000}, ensure_ascii=False).encode()  # 750 kB as UTF-8
    assert len(words) < 1024 * 1024
    answer = HTTP.request("POST", f"{ingress_url}/ingress/words", body=words, headers=BEARER)
    assert answer.status == 202, answer.data
    bulk = json.dumps({"rows": ["r" * 1000] * 3000}).encode()  # 3 MB: over execute's old fixed 1 MiB
    answer = HTTP.request("POST", f"{ingress_url}/ingress/bulk", body=bulk, headers=BEARER)
    assert answer.status == 202, answer.data
    stored = rows(database_url, "SELECT length(workload::text) FROM execution ORDER BY created_at")
    assert len(stored) == 2


# -- 4. directive headers and dead letters ------------------------------------------------------


def test_a_repeated_route_header_is_read_by_its_last_value(stack: Callable[..., Any], database_url: str) -> None:
    api_url, ingress_url = stack()
    register(api_url, listener_yaml("hooks", "{type: bearer, secret: bearer_secret}"))
    headers = urllib3.HTTPHeaderDict(BEARER)
    headers.add("x-noetl-route", "domain/handle")
    headers.add("x-noetl-route", "domain/fraud")
    answer = HTTP.request("POST", f"{ingress_url}/ingress/hooks", body=b'{"n": 1}', headers=headers)
    assert answer.status == 202, answer.data
    (path, meta), *_ = executions(database_url)
    assert path == "domain/fraud"
    assert meta["directives"]["applied"] == [
        {"header": "x-noetl-route", "controls": "dispatch.playbook", "effective_value": "domain/fraud"}
    ]


def test_the_dead_letter_of_an_acked_poison_push_names_its_message(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, ingress_url = stack()
    register(
        api_url, listener_yaml("orders", "{type: bearer, query_param: token, secret: bearer_secret}", source="pubsub")
    )
    envelope = {
        "message": {"data": base64.b64encode(b"not json").decode(), "messageId": "poison-1", "attributes": {}},
        "subscription": "projects/noetl-local/subscriptions/orders-push",
    }
    url = f"{ingress_url}/ingress/orders?token={BEARER_SECRET}"
    answer = HTTP.request("POST", url, body=json.dumps(envelope).encode(), headers={"Content-Type": "application/json"})
    assert (answer.status, json.loads(answer.data)["status"]) == (200, "dead_lettered")
    dead = rows(
        database_url,
        "SELECT payload FROM event WHERE event_type = 'subscription.message.dead_lettered'",
    )
    assert [(row[0]["message_id"], row[0]["reason"]) for row in dead] == [("poison-1", "invalid_payload")]
    assert executions(database_url) == []


# -- 5. bad input is a 4xx, never a 500 ---------------------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000


def test_deeply_nested_json_is_refused_by_a_webhook_and_dead_lettered_from_a_signed_push(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, ingress_url = stack()
    register(
        api_url,
        listener_yaml("hooks", "{type: bearer, secret: bearer_secret}"),
        listener_yaml("orders", "{type: bearer, query_param: token, secret: bearer_secret}", source="pubsub"),
    )
    webhook = HTTP.request("POST", f"{ingress_url}/ingress/hooks", body=DEEP, headers=BEARER)
    assert webhook.status == 400 and error_code(webhook) == "invalid_payload"
    url = f"{ingress_url}/ingress/orders?token={BEARER_SECRET}"
    wrapped = json.dumps({"message": {"data": base64.b64encode(DEEP).decode(), "messageId": "deep-1"}}).encode()
    for body in (wrapped, DEEP):  # nested inside the envelope's data, and the whole body
        pushed = HTTP.request("POST", url, body=body, headers={"Content-Type": "application/json"})
        assert (pushed.status, json.loads(pushed.data)["status"]) == (200, "dead_lettered"), pushed.data
    dead = rows(database_url, "SELECT payload FROM event WHERE event_type = 'subscription.message.dead_lettered'")
    assert [row[0]["reason"] for row in dead] == ["invalid_payload", "invalid_payload"]
    assert dead[0][0]["message_id"] == "deep-1"
    assert executions(database_url) == []


def test_a_catalog_document_of_nested_aliases_is_refused_quickly_and_nothing_is_stored(
    stack: Callable[..., Any], database_url: str
) -> None:
    api_url, _ingress_url = stack()
    # A valid playbook whose workload holds 9**6 "lol"s in a few hundred bytes (it was stored, 3 MB).
    laughs = '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(5)
    )
    laughs = playbook("domain/laughs").replace("workload:\n", "workload:\n" + laughs, 1)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = HTTP.request(
        "POST", f"{api_url}/api/catalog", body=laughs.encode(), headers={**auth, "Content-Type": "application/yaml"}
    )
    assert answer.status == 422 and error_code(answer) == "yaml_alias_expansion", answer.data
    deep = HTTP.request(
        "POST", f"{api_url}/api/catalog", body=b"x: " + DEEP, headers={**auth, "Content-Type": "application/yaml"}
    )
    assert deep.status == 422 and error_code(deep) == "yaml_too_deep", deep.data
    assert rows(database_url, "SELECT path FROM catalog") == []


def test_a_misconfigured_listener_answers_a_generic_503(stack: Callable[..., Any]) -> None:
    api_url, ingress_url = stack()
    register(api_url, listener_yaml("broken", "{type: standard_webhooks, secret: bearer_secret}"))  # not whsec_
    body = b'{"n": 1}'
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(time.time())),
        "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode(),
    }
    answer = HTTP.request("POST", f"{ingress_url}/ingress/broken", body=body, headers=headers)
    assert answer.status == 503
    error = json.loads(answer.data)["error"]
    assert error == {"code": "listener_unavailable", "message": "this listener cannot take deliveries now; retry later"}
    assert answer.headers["Retry-After"] == "60"
