"""Subscription lifecycle (compare-and-set transitions, event trail) and listener configuration."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from flask.testing import FlaskClient

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.lifecycle import TRANSITIONS
from tests.integration.control_fixtures import playbook, register

SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: hooks, path: subscriptions/hooks}}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/hooks
    verify: {{type: hmac_sha256, header: x-signature, secret: {secret}}}
  dispatch: {{playbook: domain/handle, execution_pool: iot}}
  headers:
    directives:
      - {{header: x-noetl-pool, controls: dispatch.execution_pool, allowed: [shared, iot]}}
  dedup: {{enabled: true, window_secs: 300}}
"""


@pytest.fixture
def subscribed(client: FlaskClient) -> FlaskClient:
    register(client, playbook("domain/handle"))
    register(client, SUBSCRIPTION.format(secret="gh_webhook"))
    return client


def act(client: FlaskClient, sid: str, action: str, **body: Any) -> Any:
    return client.post(f"/api/subscriptions/{sid}/{action}", json=body or None)


def trail(plane: ControlPlane, sid: str) -> list[tuple[str, str, str, int]]:
    return [
        (e.event_type, e.payload.get("from_state", ""), e.payload["to_state"], e.stream_version)
        for e in plane.store.read_stream(f"subscription/{sid}")
    ]


def test_register_is_idempotent_while_live(subscribed: FlaskClient) -> None:
    first = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"})
    again = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["subscription_id"] == again.get_json()["subscription_id"]
    assert first.get_json()["state"] == "registered"
    listed = subscribed.get("/api/subscriptions").get_json()["items"]
    assert [s["subscription_id"] for s in listed] == [first.get_json()["subscription_id"]]


def test_register_refuses_playbooks_and_unknown_paths(subscribed: FlaskClient) -> None:
    not_sub = subscribed.post("/api/subscriptions/register", json={"path": "domain/handle"})
    assert not_sub.status_code == 422 and not_sub.get_json()["error"]["code"] == "not_a_subscription"
    assert subscribed.post("/api/subscriptions/register", json={"path": "x/y"}).status_code == 404


def test_full_lifecycle_writes_one_event_per_transition(subscribed: FlaskClient, plane: ControlPlane) -> None:
    sid = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).get_json()[
        "subscription_id"
    ]
    for action, state in [
        ("activate", "active"),
        ("pause", "paused"),
        ("resume", "active"),
        ("drain", "draining"),
        ("deactivate", "deactivated"),
    ]:
        response = act(subscribed, sid, action)
        assert response.status_code == 200 and response.get_json()["state"] == state
    assert trail(plane, sid) == [
        ("subscription.registered", "", "registered", 1),
        ("subscription.activated", "registered", "active", 2),
        ("subscription.paused", "active", "paused", 3),
        ("subscription.resumed", "paused", "active", 4),
        ("subscription.draining", "active", "draining", 5),
        ("subscription.deactivated", "draining", "deactivated", 6),
    ]
    assert subscribed.get(f"/api/subscriptions/{sid}").get_json()["version"] == 6
    # Once deactivated, registering again makes a new subscription.
    again = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).get_json()
    assert again["subscription_id"] != sid and again["state"] == "registered"


def test_an_invalid_transition_is_409_with_the_current_state(subscribed: FlaskClient) -> None:
    sid = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).get_json()[
        "subscription_id"
    ]
    response = act(subscribed, sid, "pause")
    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "invalid_transition" and error["details"]["state"] == "registered"
    assert act(subscribed, sid, "explode").status_code == 404
    assert act(subscribed, "1", "activate").status_code == 404
    stale = act(subscribed, sid, "activate", expected_version=5)
    assert stale.status_code == 409 and stale.get_json()["error"]["code"] == "version_conflict"


def test_concurrent_transitions_never_skip_a_state(subscribed: FlaskClient, plane: ControlPlane) -> None:
    sid = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).get_json()[
        "subscription_id"
    ]
    assert act(subscribed, sid, "activate").status_code == 200
    barrier = threading.Barrier(8)
    outcomes: list[tuple[str, int]] = []
    lock = threading.Lock()

    def toggle(worker: int) -> None:
        for round_ in range(6):
            barrier.wait()
            action = "pause" if (worker + round_) % 2 else "resume"
            status = act(subscribed, sid, action).status_code
            with lock:
                outcomes.append((action, status))

    threads = [threading.Thread(target=toggle, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert {status for _, status in outcomes} <= {200, 409}
    events = trail(plane, sid)
    successes = sum(1 for _, status in outcomes if status == 200)
    assert len(events) == 2 + successes  # registered, activated, then one event per successful call
    assert [v for *_, v in events] == list(range(1, len(events) + 1))
    action_of = {event_type: action for action, (_, _, event_type) in TRANSITIONS.items()}
    for (_, _, previous_to, _), (event_type, from_state, to_state, _) in itertools.pairwise(events):
        allowed, target, _ = TRANSITIONS[action_of[event_type]]
        assert from_state == previous_to and from_state in allowed and to_state == target
    assert subscribed.get(f"/api/subscriptions/{sid}").get_json()["state"] == events[-1][2]


def test_listener_config_resolves_the_secret_alias(subscribed: FlaskClient) -> None:
    sid = subscribed.post("/api/subscriptions/register", json={"path": "subscriptions/hooks"}).get_json()[
        "subscription_id"
    ]
    response = subscribed.get("/api/internal/ingress/hooks")
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    config = response.get_json()
    assert config["verify"]["secret"] == "s3cret-value" and config["verify"]["secret_alias"] == "gh_webhook"
    assert config["verify"]["type"] == "hmac_sha256" and config["verify"]["header"] == "x-signature"
    assert (config["path"], config["subscription_id"], config["state"]) == ("subscriptions/hooks", sid, "registered")
    assert config["dispatch"]["playbook"] == "domain/handle" and config["dedup"]["enabled"] is True
    assert config["headers"]["directives"][0]["allowed"] == ["shared", "iot"]


def test_unknown_listener_is_404_and_a_missing_secret_is_503(subscribed: FlaskClient) -> None:
    assert subscribed.get("/api/internal/ingress/nobody").get_json()["error"]["code"] == "unknown_listener"
    assert subscribed.get("/api/internal/ingress/BAD..name").status_code == 404
    register(subscribed, SUBSCRIPTION.format(secret="not_in_the_wallet"))  # version 2 names another secret
    missing = subscribed.get("/api/internal/ingress/hooks")
    assert missing.status_code == 503 and missing.get_json()["error"]["code"] == "listener_secret_missing"
    assert "not_in_the_wallet" in missing.get_json()["error"]["message"]


def test_listener_config_is_only_for_the_ingress_role(plane: ControlPlane, subscribed: FlaskClient) -> None:
    from noetl_cloud.auth import roles
    from noetl_cloud.auth.internal import InternalAuth
    from noetl_cloud.control.app import build_app
    from tests.integration.control_fixtures import TOKEN

    restricted = ControlPlane(plane.settings)
    try:
        # the same token, holding every caller role but the ingress's
        others = roles.CALLER_ROLES - {roles.INGRESS}
        client = build_app(restricted, InternalAuth(token=TOKEN, roles=others)).test_client()
        for path in ("/api/internal/ingress/hooks", "/api/internal/ingress/hooks/audit"):
            method = client.post if path.endswith("audit") else client.get
            response = method(path, headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status_code == 403 and response.get_json()["error"]["code"] == "forbidden_role"
    finally:
        restricted.engine.dispose()
