"""Replay protection of the schemes that sign no id (issue #21 item 3): ``hmac_sha256`` and ``bearer``
deliveries are keyed on the body digest by default, inside the listener's replay window, with
``verify.replay: none`` as the validated opt-out. Here: the delivery key the ingress sends with each
start (the control plane claims it in the start's transaction: tests/integration/test_control_execute.py
runs a key twice, past its window and concurrently; tests/e2e/test_edge_replay.py over HTTP)."""

from __future__ import annotations

import hashlib
import hmac
import itertools
from typing import Any

import pytest

from noetl_cloud.ingress.outcomes import ListenerMisconfigured
from noetl_cloud.ingress.replay import ReplayPolicy, body_digest
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.web.client import ApiResponse
from tests.unit.spec_support import problem_at, rejection

SECRET = "hmac-secret"
TOKEN = "bearer-token"


class Forwards:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def post(self, path: str, json: Any = None, **_kw: Any) -> ApiResponse:
        self.requests.append(json)
        return ApiResponse(202, {"execution_id": str(len(self.requests)), "status": "started"}, {})


def service(api: Forwards) -> IngressService:
    ids = itertools.count()
    return IngressService(
        None,  # type: ignore[arg-type]
        api,  # type: ignore[arg-type]
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,
        clock=lambda: 1_800_000_000,
    )


def listener(verify: dict[str, Any], name: str = "hooks") -> dict[str, Any]:
    return {
        "listener": name,
        "state": "active",
        "source": "webhook",
        "verify": verify,
        "dispatch": {"playbook": "domain/handle", "payload_from": "message.json"},
        "dedup": {"enabled": False, "window_secs": 3600},
    }


def mac(body: bytes) -> list[tuple[str, str]]:
    return [("X-Signature", hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest())]


HMAC = {"type": "hmac_sha256", "header": "x-signature", "secret": SECRET}
BEARER = {"type": "bearer", "secret": TOKEN}
BEARER_HEADERS = [("Authorization", f"Bearer {TOKEN}")]


def delivered(config: dict[str, Any], body: bytes, headers: list[tuple[str, str]], url_name: str = "hooks") -> Any:
    """The ``delivery`` key of the one start a delivery forwards."""
    api = Forwards()
    assert service(api).handle(url_name, config, body, headers).status == "accepted"
    return api.requests[0].get("delivery")


@pytest.mark.parametrize("scheme", ["hmac_sha256", "bearer"])
def test_the_delivery_key_is_the_body_digest_for_the_default_window(scheme: str) -> None:
    body = b'{"n": 1}'
    config, headers = (listener(HMAC), mac(body)) if scheme == "hmac_sha256" else (listener(BEARER), BEARER_HEADERS)
    assert delivered(config, body, headers) == {"key": f"hooks/{body_digest(body)}", "window_secs": 360}


def test_a_different_body_is_a_different_key() -> None:
    keys = {delivered(listener(HMAC), body, mac(body))["key"] for body in (b'{"n": 1}', b'{"n": 2}')}
    assert len(keys) == 2


def test_the_key_names_the_canonical_listener_not_the_url_alias() -> None:
    body = b'{"n": 1}'
    delivery = delivered(listener(HMAC, name="hooks"), body, mac(body), url_name="alias-from-url")
    assert delivery["key"] == f"hooks/{body_digest(body)}"


def test_replay_window_s_sets_the_keys_window() -> None:
    body = b'{"n": 1}'
    assert delivered(listener({**HMAC, "replay_window_s": 900}), body, mac(body))["window_secs"] == 900


def test_without_replay_window_s_the_window_is_the_tolerance_plus_a_minute() -> None:
    body = b'{"n": 1}'
    assert delivered(listener({**BEARER, "tolerance_s": 100}), body, BEARER_HEADERS)["window_secs"] == 160


@pytest.mark.parametrize("scheme", ["hmac_sha256", "bearer"])
def test_replay_none_sends_no_delivery_key_and_keeps_the_digest_as_the_message_id(scheme: str) -> None:
    api, body = Forwards(), b'{"ping": true}'
    svc = service(api)
    verify, headers = (HMAC, mac(body)) if scheme == "hmac_sha256" else (BEARER, BEARER_HEADERS)
    config = listener({**verify, "replay": "none"})
    assert [svc.handle("hooks", config, body, headers).status for _ in range(2)] == ["accepted", "accepted"]
    assert [r.get("delivery") for r in api.requests] == [None, None]
    assert [r["meta"]["message_id"] for r in api.requests] == [body_digest(body)] * 2  # dedup can still key on it


def test_dedup_enabled_with_replay_none_keys_the_control_planes_window_on_the_content() -> None:
    api = Forwards()
    svc, body = service(api), b'{"n": 1}'
    config = {**listener({**HMAC, "replay": "none"}), "dedup": {"enabled": True, "window_secs": 600}}
    for _ in range(2):
        svc.handle("hooks", config, body, mac(body))
    assert [r["dedup"]["key"] for r in api.requests] == [body_digest(body)] * 2


@pytest.mark.parametrize(
    "verify",
    [
        {**HMAC, "replay": "sometimes"},
        {**HMAC, "replay_window_s": 0},
        {**HMAC, "replay_window_s": "1h"},
        {**BEARER, "tolerance_s": -1},
    ],
)
def test_a_replay_setting_the_spec_would_refuse_makes_the_listener_unavailable(verify: dict[str, Any]) -> None:
    api = Forwards()
    with pytest.raises(ListenerMisconfigured):
        service(api).handle("hooks", listener(verify), b"{}", BEARER_HEADERS)
    assert api.requests == []


def test_a_signed_timestamp_keeps_the_tolerance_window() -> None:
    policy = ReplayPolicy.from_mapping({"type": "stripe", "tolerance_s": 120, "replay_window_s": 9000})
    assert policy.window_s == 180


# -- the listener spec ----------------------------------------------------------------------------


def document(verify: dict[str, Any], source: str = "webhook") -> dict[str, Any]:
    return {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": "hooks", "path": "subscriptions/hooks"},
        "spec": {
            "source": source,
            "mode": "push",
            "ingress": {"gateway_path": "/ingress/hooks", "verify": verify},
            "dispatch": {"playbook": "domain/handle"},
        },
    }


@pytest.mark.parametrize(
    ("verify", "source", "field", "words"),
    [
        ({"type": "stripe", "secret": "s", "replay": "none"}, "webhook", "replay", "hmac_sha256 or bearer"),
        ({"type": "github", "secret": "s", "replay": "none"}, "webhook", "replay", "what its signature covers"),
        ({"type": "bearer", "secret": "s", "replay": "none"}, "pubsub", "replay", "its messageId"),
        ({"type": "hmac_sha256", "secret": "s", "replay": "never"}, "webhook", "replay", "body_digest"),
        ({"type": "stripe", "secret": "s", "replay_window_s": 600}, "webhook", "replay_window_s", "tolerance_s"),
        (
            {"type": "standard_webhooks", "secret": "s", "replay_window_s": 600},
            "webhook",
            "replay_window_s",
            "signs a timestamp",
        ),
        (
            {"type": "hmac_sha256", "secret": "s", "replay": "none", "replay_window_s": 600},
            "webhook",
            "replay_window_s",
            "keeps no replay window",
        ),
        ({"type": "hmac_sha256", "secret": "s", "replay_window_s": 0}, "webhook", "replay_window_s", "greater"),
        ({"type": "hmac_sha256", "secret": "s", "replay_window_s": 604_801}, "webhook", "replay_window_s", "less"),
    ],
)
def test_the_spec_refuses_a_replay_setting_that_cannot_apply(
    verify: dict[str, Any], source: str, field: str, words: str
) -> None:
    problem = problem_at(rejection(document(verify, source)), f"spec.ingress.verify.{field}")
    assert words in problem["problem"]


@pytest.mark.parametrize(
    "verify",
    [
        {"type": "hmac_sha256", "secret": "s", "replay": "none"},
        {"type": "bearer", "secret": "s", "replay": "body_digest", "replay_window_s": 86_400},
        {"type": "github", "secret": "s", "replay_window_s": 3600},
        {"type": "hmac_sha256", "secret": "s"},
    ],
)
def test_the_spec_takes_the_replay_settings_where_they_apply(verify: dict[str, Any]) -> None:
    from noetl_cloud.spec import parse_document

    parsed = parse_document(__import__("yaml").safe_dump(document(verify)))
    assert parsed.spec.ingress.verify.replay == verify.get("replay")  # type: ignore[union-attr]
