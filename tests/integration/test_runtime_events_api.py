"""``POST /api/internal/subscriptions/{id}/events``: the subscription runtime's own events, on
PostgreSQL through the execute role's app: written once per idempotency key on the subscription's
``runtime`` stream, validated (an allowlist of types, each with its payload schema), tenant-scoped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from flask.testing import FlaskClient

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from tests.integration.control_fixtures import playbook, register

SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: sensors, path: subscriptions/sensors}
spec:
  source: pubsub
  mode: pull
  subscription: projects/noetl-local/subscriptions/sensors-pull
  dispatch: {playbook: domain/ingest}
  limits: {max_dispatch_per_sec: 2}
"""
PATH = "subscriptions/sensors"
EVENT_TIME = "2026-03-01T12:00:00.250000+00:00"


def rate_limited(key: str = "i-1/1", **payload: Any) -> dict[str, Any]:
    body = {"path": PATH, "max_dispatch_per_sec": 2.0, "wait_s": 0.42, "held": 7, "instance": "i-1"}
    return {
        "event_type": "subscription.rate_limited",
        "payload": {**body, **payload},
        "idempotency_key": key,
        "event_time": EVENT_TIME,
    }


def post(client: FlaskClient, sid: str, *events: dict[str, Any]) -> Any:
    return client.post(f"/api/internal/subscriptions/{sid}/events", json={"events": list(events)})


@pytest.fixture
def sid(client: FlaskClient) -> str:
    register(client, playbook("domain/ingest"))
    register(client, SUBSCRIPTION)
    response = client.post("/api/subscriptions/register", json={"path": PATH})
    assert response.status_code == 201, response.get_json()
    return str(response.get_json()["subscription_id"])


def runtime_stream(plane: ControlPlane, sid: str) -> list[Any]:
    return plane.store.read_stream(f"subscription/{sid}/runtime")


def test_a_rate_limited_event_lands_on_the_subscriptions_runtime_stream(
    client: FlaskClient, plane: ControlPlane, sid: str
) -> None:
    response = post(client, sid, rate_limited())
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"recorded": 1, "duplicates": 0}
    (event,) = runtime_stream(plane, sid)
    assert event.event_type == "subscription.rate_limited"
    assert (event.aggregate_type, event.aggregate_id, event.stream_version) == ("subscription", sid, 1)
    assert event.payload == {"path": PATH, "max_dispatch_per_sec": 2.0, "wait_s": 0.42, "held": 7, "instance": "i-1"}
    assert event.event_time == datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)  # the runtime's clock
    # The lifecycle trail is untouched, and its compare-and-set still moves the subscription.
    assert [e.event_type for e in plane.store.read_stream(f"subscription/{sid}")] == ["subscription.registered"]
    activated = client.post(f"/api/subscriptions/{sid}/activate")
    assert activated.status_code == 200 and activated.get_json()["state"] == "active"


def test_a_retried_post_writes_each_event_once(client: FlaskClient, plane: ControlPlane, sid: str) -> None:
    first = post(client, sid, rate_limited("i-1/1"))
    again = post(client, sid, rate_limited("i-1/1"), rate_limited("i-1/2", wait_s=0.5))
    assert first.get_json() == {"recorded": 1, "duplicates": 0}
    assert again.status_code == 200 and again.get_json() == {"recorded": 1, "duplicates": 1}
    assert [e.payload["wait_s"] for e in runtime_stream(plane, sid)] == [0.42, 0.5]


def test_the_same_key_on_another_subscription_is_another_event(
    client: FlaskClient, plane: ControlPlane, sid: str
) -> None:
    client.post(f"/api/subscriptions/{sid}/deactivate").get_json()
    other = str(client.post("/api/subscriptions/register", json={"path": PATH}).get_json()["subscription_id"])
    assert other != sid
    assert post(client, sid, rate_limited("k")).get_json() == {"recorded": 1, "duplicates": 0}
    assert post(client, other, rate_limited("k")).get_json() == {"recorded": 1, "duplicates": 0}
    assert len(runtime_stream(plane, sid)) == len(runtime_stream(plane, other)) == 1


def test_an_event_type_a_runtime_may_not_write_is_refused_and_nothing_is_written(
    client: FlaskClient, plane: ControlPlane, sid: str
) -> None:
    forged = {**rate_limited("i-1/2"), "event_type": "subscription.deactivated"}
    response = post(client, sid, rate_limited("i-1/1"), forged)
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "unknown_event_type"
    assert error["details"] == {"index": 1, "allowed": ["subscription.rate_limited"]}
    assert runtime_stream(plane, sid) == []  # the valid first event was not written either


def test_an_unknown_subscription_is_404(client: FlaskClient, plane: ControlPlane, sid: str) -> None:
    response = post(client, "123456789", rate_limited())
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "subscription_not_found"
    assert plane.store.stream_version("subscription/123456789/runtime") == 0
    not_an_id = post(client, "-", rate_limited())
    assert not_an_id.status_code == 404 and not_an_id.get_json()["error"]["code"] == "not_found"


def test_a_subscription_of_another_tenant_is_404(client: FlaskClient, plane: ControlPlane, sid: str) -> None:
    other = ControlPlane(plane.settings.model_copy(update={"tenant_id": "someone-else"}))
    try:
        foreign = build_app(other, InternalAuth(token="t")).test_client()
        response = foreign.post(
            f"/api/internal/subscriptions/{sid}/events",
            json={"events": [rate_limited()]},
            headers={"Authorization": "Bearer t"},
        )
        assert response.status_code == 404 and response.get_json()["error"]["code"] == "subscription_not_found"
    finally:
        other.engine.dispose()
    assert runtime_stream(plane, sid) == []


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (rate_limited(held=-1), "events.0.payload.held"),
        (rate_limited(max_dispatch_per_sec=0), "events.0.payload.max_dispatch_per_sec"),
        (rate_limited(body="a message body"), "events.0.payload.body"),
        ({k: v for k, v in rate_limited().items() if k != "payload"} | {"payload": {"path": PATH}}, None),
    ],
    ids=["negative-held", "zero-rate", "extra-field", "missing-fields"],
)
def test_a_payload_outside_its_schema_is_refused(
    client: FlaskClient, plane: ControlPlane, sid: str, event: dict[str, Any], field: str | None
) -> None:
    response = post(client, sid, event)
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "invalid_event_payload"
    fields = {d["field"] for d in error["details"]}
    assert field in fields if field else fields >= {"events.0.payload.wait_s", "events.0.payload.held"}
    assert runtime_stream(plane, sid) == []


def test_an_event_for_another_path_is_refused(client: FlaskClient, plane: ControlPlane, sid: str) -> None:
    response = post(client, sid, rate_limited(path="subscriptions/other"))
    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "subscription_path_mismatch"
    assert runtime_stream(plane, sid) == []


@pytest.mark.parametrize(
    "body",
    [
        {"events": []},
        {"events": [rate_limited()], "extra": 1},
        {"events": [{**rate_limited(), "event_time": "2026-03-01T12:00:00"}]},  # no time zone
        {"events": [{**rate_limited(), "idempotency_key": ""}]},
        {"events": [rate_limited(f"k{n}") for n in range(101)]},
    ],
    ids=["empty", "extra-field", "naive-time", "empty-key", "too-many"],
)
def test_a_malformed_body_is_422(client: FlaskClient, plane: ControlPlane, sid: str, body: dict[str, Any]) -> None:
    response = client.post(f"/api/internal/subscriptions/{sid}/events", json=body)
    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "validation_failed"
    assert runtime_stream(plane, sid) == []


def test_a_body_that_is_not_a_json_object_is_400(client: FlaskClient, sid: str) -> None:
    response = client.post(f"/api/internal/subscriptions/{sid}/events", data="[1]", content_type="application/json")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_json"


def test_the_route_requires_an_internal_caller(plane: ControlPlane, sid: str) -> None:
    anonymous = build_app(plane, InternalAuth(token="integration-token")).test_client()
    response = anonymous.post(f"/api/internal/subscriptions/{sid}/events", json={"events": [rate_limited()]})
    assert response.status_code == 401 and response.get_json()["error"]["code"] == "missing_credentials"
    assert runtime_stream(plane, sid) == []
