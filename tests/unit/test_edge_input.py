"""Hostile input at the edge, as pure logic (issue #21): names in paths, bodies, directives, JSON depth."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from flask import request

from noetl_cloud.ingress.listeners import ListenerDirectory
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app
from noetl_cloud.web.app import body_limit
from noetl_cloud.web.client import ApiResponse, segment


class RecordingApi:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def get(self, path: str, **_kw: Any) -> ApiResponse:
        self.paths.append(path)
        return ApiResponse(404, {"error": {"code": "unknown_listener", "message": "no"}}, {})


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("hooks?x", "hooks%3Fx"),
        ("a#b", "a%23b"),
        ("a b", "a%20b"),
        ("a\r\nb", "a%0D%0Ab"),
        ("a/b", "a%2Fb"),
        (42, "42"),
    ],
)
def test_a_path_segment_is_percent_encoded_whole(value: object, encoded: str) -> None:
    assert segment(value) == encoded


def test_the_listener_directory_asks_the_control_plane_for_exactly_the_name_it_was_given() -> None:
    api = RecordingApi()
    with pytest.raises(Exception, match="no listener"):
        ListenerDirectory(api).get("hooks?x")  # type: ignore[arg-type]
    assert api.paths == ["/api/internal/ingress/hooks%3Fx"]


# -- 2. bodies --------------------------------------------------------------------------------------


def chunked_request(app: Any, path: str, body: bytes) -> Any:
    """``body`` as a WSGI server hands over a chunked request: no Content-Length, the stream ends
    where the body does (``wsgi.input_terminated``)."""
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Response

    environ = EnvironBuilder(path=path, method="POST", input_stream=io.BytesIO(body)).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input_terminated"] = True
    return Response.from_app(app.wsgi_app, environ)


@pytest.mark.parametrize("size", [1024, 1025, 4096, 100_000])
def test_a_chunked_body_over_the_limit_is_413_and_never_reaches_the_handler(size: int) -> None:
    seen: list[int] = []
    app = create_app("test", Settings(max_request_bytes=1024))

    @app.post("/echo")
    def echo() -> dict[str, int]:
        seen.append(len(request.get_data(cache=False)))
        return {"bytes": seen[-1]}

    response = chunked_request(app, "/echo", b"x" * size)
    if size <= 1024:
        assert (response.status_code, seen) == (200, [size])
    else:
        assert response.status_code == 413 and seen == []
        assert json.loads(response.get_data())["error"]["code"] == "payload_too_large"


def test_a_route_may_take_more_than_the_role_limit_and_no_more() -> None:
    app = create_app("test", Settings(max_request_bytes=1024))

    @app.post("/big")
    @body_limit(4096)
    def big() -> dict[str, int]:
        return {"bytes": len(request.get_data(cache=False))}

    client = app.test_client()
    assert client.post("/big", data=b"x" * 4096).status_code == 200
    assert client.post("/big", data=b"x" * 4097).status_code == 413
    assert chunked_request(app, "/big", b"x" * 4096).status_code == 200
    assert chunked_request(app, "/big", b"x" * 4097).status_code == 413


def test_the_api_client_sends_non_ascii_json_as_utf8_of_its_own_size() -> None:
    from noetl_cloud.web.client import _encode

    assert _encode({"t": "é" * 10}) == ('{"t":"' + "é" * 10 + '"}').encode()
    assert _encode({"t": "\ud800"}) == b'{"t":"\\ud800"}'  # a lone surrogate has no UTF-8 form


# -- 4. dead letters ----------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["bm90IGpzb24=", "%%% not base64"])
def test_a_poison_push_message_is_refused_with_its_message_id(data: str) -> None:
    from noetl_cloud.ingress.push import BadMessage, pubsub_message

    body = json.dumps({"message": {"data": data, "messageId": "poison-1"}}).encode()
    with pytest.raises(BadMessage) as caught:
        pubsub_message(body, [], principal="p", payload_from="message.json", drop=frozenset(), new_id=lambda: "new")
    assert caught.value.message_id == "poison-1"


# -- 5. bad input is a 4xx, never a 500 ---------------------------------------------------------


@pytest.mark.parametrize(("depth", "refused"), [(1, False), (128, False), (129, True), (5000, True), (100_000, True)])
def test_json_nested_past_the_bound_is_malformed_json_not_a_recursion_error(depth: int, refused: bool) -> None:
    from noetl_cloud import jsonsafe

    text = "[" * depth + "]" * depth
    if refused:
        with pytest.raises(ValueError, match="nested deeper"):
            jsonsafe.loads(text)
    else:
        assert jsonsafe.loads(text.encode()) is not None
    assert jsonsafe.loads('{"a": "' + "[" * 500 + '"}') == {"a": "[" * 500}  # brackets in strings do not nest


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1),
        (7, 7),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("9" * 19, None),
        ("²", None),
        ("٣", None),
        ("-1", None),
        ("", None),
        (None, None),
        (True, None),
        ("1" * 20, None),
    ],
)
def test_an_id_from_text_is_ascii_digits_within_a_bigint(value: object, expected: int | None) -> None:
    from noetl_cloud.ids import id_from_text

    assert id_from_text(value) == expected


def test_a_misconfigured_listener_tells_the_sender_nothing_and_logs_the_detail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from noetl_cloud.ingress.app import build_app
    from noetl_cloud.ingress.service import IngressService

    config = {
        "listener": "hooks",
        "state": "active",
        "source": "webhook",
        "verify": {"type": "hmac_sha256", "encoding": "rot13", "secret": "s"},  # no such encoding
        "dispatch": {"playbook": "domain/handle"},
    }

    class Api:
        def get(self, path: str, **_kw: Any) -> ApiResponse:
            return ApiResponse(200, config, {})

        def post(self, path: str, json: Any = None, **_kw: Any) -> ApiResponse:
            raise AssertionError("nothing is forwarded or audited")

    api = Api()
    service = IngressService(
        ListenerDirectory(api),  # type: ignore[arg-type]
        api,  # type: ignore[arg-type]
        new_id=lambda: "1",
        jwks_for=lambda _url: None,
    )
    answer = build_app(Settings(), service).test_client().post("/ingress/hooks", data=b"{}")
    assert answer.status_code == 503
    assert answer.get_json()["error"]["code"] == "listener_unavailable"
    assert "encoding" not in answer.get_data(as_text=True)
    assert any("misconfigured" in r.getMessage() and "encoding" in r.getMessage() for r in caplog.records)


# -- 3. replay protection per scheme --------------------------------------------------------------


class Forwards:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def post(self, path: str, json: Any = None, **_kw: Any) -> ApiResponse:
        self.requests.append(json)
        return ApiResponse(202, {"execution_id": str(len(self.requests))}, {})


def replaying_service(api: Forwards, now: float) -> Any:
    from noetl_cloud.ingress.service import IngressService

    ids = iter(range(1000))
    return IngressService(
        None,  # type: ignore[arg-type]
        api,  # type: ignore[arg-type]
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,
        clock=lambda: now,
    )


def listener(verify: dict[str, Any], source: str = "webhook", dedup: bool = False) -> dict[str, Any]:
    return {
        "listener": "hooks",
        "state": "active",
        "source": source,
        "verify": verify,
        "dispatch": {"playbook": "domain/handle", "payload_from": "message.json"},
        "dedup": {"enabled": dedup, "window_secs": 600},
    }


def test_a_stripe_delivery_posted_twice_carries_its_event_id_as_the_delivery_key() -> None:
    import hashlib
    import hmac

    now, api = 1_800_000_000, Forwards()
    service = replaying_service(api, now)
    config = listener({"type": "stripe", "secret": "whsec_x"})
    body = json.dumps({"id": "evt_123", "type": "charge.succeeded"}).encode()
    digest = hmac.new(b"whsec_x", f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    headers = [("Stripe-Signature", f"t={now},v1={digest}")]
    for _ in range(2):
        service.handle("hooks", config, body, headers)
    # Both copies carry one delivery key, which the control plane claims with the first start.
    assert [r["delivery"]["key"] for r in api.requests] == ["hooks/evt_123"] * 2
    assert api.requests[0]["meta"]["message_id"] == "evt_123"


def test_a_github_delivery_replayed_under_a_fresh_delivery_id_keeps_its_delivery_key() -> None:
    import hashlib
    import hmac

    api = Forwards()
    service = replaying_service(api, 1_800_000_000)
    config = listener({"type": "github", "secret": "gh"})
    body = b'{"action": "opened"}'
    signature = "sha256=" + hmac.new(b"gh", body, hashlib.sha256).hexdigest()
    for delivery in ("d-1", "d-2"):
        service.handle("hooks", config, body, [("X-Hub-Signature-256", signature), ("X-GitHub-Delivery", delivery)])
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert [r["delivery"]["key"] for r in api.requests] == [f"hooks/{digest}"] * 2  # not the unsigned id


def test_a_pubsub_push_redelivered_carries_its_message_id_as_the_delivery_key() -> None:
    import base64

    api = Forwards()
    service = replaying_service(api, 1_800_000_000)
    config = listener({"type": "bearer", "query_param": "token", "secret": "t"}, source="pubsub")
    body = json.dumps({"message": {"data": base64.b64encode(b"{}").decode(), "messageId": "ps-9"}}).encode()
    for _ in range(2):
        service.handle("hooks", config, body, [], {"token": "t"})
    assert [r["delivery"]["key"] for r in api.requests] == ["hooks/ps-9"] * 2


def test_a_pubsub_push_key_carries_the_publish_time_that_its_redelivery_repeats() -> None:
    """An emulator restarted (or a topic created again) numbers its messages anew: the publish time
    tells two messages with one id apart, and a redelivery of one envelope keeps its key."""
    import base64

    api = Forwards()
    service = replaying_service(api, 1_800_000_000)
    config = listener({"type": "bearer", "query_param": "token", "secret": "t"}, source="pubsub")

    def envelope(published: str) -> bytes:
        data = base64.b64encode(b"{}").decode()
        return json.dumps({"message": {"data": data, "messageId": "150", "publishTime": published}}).encode()

    for published in ("2026-11-27T09:01:00.000Z", "2026-11-27T09:01:00.000Z", "2026-11-27T09:09:00.000Z"):
        service.handle("hooks", config, envelope(published), [], {"token": "t"})
    keys = [r["delivery"]["key"] for r in api.requests]
    assert keys[0] == keys[1] == "hooks/150@2026-11-27T09:01:00.000Z" and keys[2] != keys[0]


def test_dedup_enabled_keys_an_hmac_delivery_and_its_replay_on_its_content() -> None:
    import hashlib
    import hmac

    api = Forwards()
    service = replaying_service(api, 1_800_000_000)
    config = listener({"type": "hmac_sha256", "header": "x-signature", "secret": "s"}, dedup=True)
    body = b'{"n": 1}'
    headers = [("X-Signature", hmac.new(b"s", body, hashlib.sha256).hexdigest())]
    service.handle("hooks", config, body, headers)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    # The replay window (the delivery key) and the subscription's dedup window (which outlives it) key
    # on the same digest; the control plane claims both with the start (replay: none leaves the
    # dedup window alone, tests/unit/test_ingress_replay_digest.py).
    assert api.requests[0]["delivery"] == {"key": f"hooks/{digest}", "window_secs": 360}
    assert api.requests[0]["dedup"] == {"key": digest, "window_secs": 600}
