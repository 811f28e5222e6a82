"""Executions: single, batch, dedup window, trace inheritance, outbox publish, cancel."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select, text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.db.schema import command, event, execution, outbox, subscription_dedup
from tests.integration.control_fixtures import Topics, count_rows

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_execute_writes_execution_events_command_and_publishes_the_notification(
    ready: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    response = ready.post(
        "/api/execute",
        json={"path": "domain/handle", "payload": {"n": 1}, "trace": {"traceparent": TRACEPARENT}, "meta": {"k": "v"}},
    )
    assert response.status_code == 202
    body = response.get_json()
    assert body["status"] == "started" and body["execution_pool"] == "shared"
    eid = body["execution_id"]

    events = ready.get(f"/api/executions/{eid}/events").get_json()["events"]
    assert [e["event_type"] for e in events] == ["playbook.started", "step.started", "command.issued"]
    started, step_started, issued = events
    assert started["payload"]["workload"] == {"n": 1} and started["payload"]["entry_step"] == "start"
    assert started["meta"]["trace"]["traceparent"] == TRACEPARENT and started["meta"]["k"] == "v"
    assert step_started["causation_id"] == started["event_id"] and step_started["payload"]["step"] == "start"
    assert issued["causation_id"] == step_started["event_id"] and issued["payload"]["step"] == "start"
    assert issued["payload"]["kind"] == "step" and issued["payload"]["attempt"] == 1

    (message,) = topics.pull("shared", 1)
    data = json.loads(message.data)
    assert data == {
        "execution_id": eid,
        "command_id": issued["payload"]["command_id"],
        "event_id": issued["event_id"],
        "step": "start",
        "attempt": 1,
    }
    assert message.attributes["traceparent"] == TRACEPARENT and message.attributes["execution_id"] == eid

    detail = ready.get(f"/api/executions/{eid}").get_json()
    assert detail["status"] == "started" and detail["event_count"] == 3 and detail["path"] == "domain/handle"
    assert count_rows(plane, command, command.c.execution_id == int(eid), command.c.status == "issued") == 1
    with plane.engine.connect() as conn:
        topics_left = conn.execute(select(outbox.c.topic)).scalars().all()
    assert plane.settings.command_topic("shared") not in topics_left  # published, then deleted


def test_one_thousand_executions_give_one_thousand_events_and_notifications(
    ready: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    def one(i: int) -> str:
        response = ready.post("/api/execute", json={"path": "domain/handle", "workload": {"i": i}})
        assert response.status_code == 202
        return str(response.get_json()["execution_id"])

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(one, range(1000)))
    assert len(set(ids)) == 1000
    assert count_rows(plane, event, event.c.event_type == "playbook.started") == 1000
    messages = topics.pull("shared", 1000)
    assert len(messages) == 1000
    assert {json.loads(m.data)["execution_id"] for m in messages} == set(ids)


def test_pool_routes_to_its_topic_and_unknown_pools_are_refused(ready: FlaskClient, topics: Topics) -> None:
    response = ready.post("/api/execute", json={"path": "domain/handle", "execution_pool": "iot"})
    assert response.get_json()["execution_pool"] == "iot"
    (message,) = topics.pull("iot", 1)
    assert json.loads(message.data)["execution_id"] == response.get_json()["execution_id"]
    refused = ready.post("/api/execute", json={"path": "domain/handle", "execution_pool": "gpu"})
    assert refused.status_code == 422 and refused.get_json()["error"]["code"] == "unknown_pool"


def test_a_request_without_trace_inherits_the_parents_trace(ready: FlaskClient, topics: Topics) -> None:
    parent = ready.post(
        "/api/execute", json={"path": "domain/handle", "trace": {"traceparent": TRACEPARENT, "tracestate": "v=1"}}
    )
    pid = parent.get_json()["execution_id"]
    child = ready.post("/api/execute", json={"path": "domain/handle", "parent_execution_id": pid})
    detail = ready.get(f"/api/executions/{child.get_json()['execution_id']}").get_json()
    assert detail["trace"] == {"traceparent": TRACEPARENT, "tracestate": "v=1"}
    assert detail["parent_execution_id"] == pid
    messages = topics.pull("shared", 2)
    assert {m.attributes["traceparent"] for m in messages} == {TRACEPARENT}


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"path": "domain/missing"}, 404, "playbook_not_found"),
        ({}, 422, "validation_failed"),
        ({"path": "domain/handle", "catalog_id": "1"}, 422, "validation_failed"),
        ({"path": "domain/handle", "dedup": {"key": ""}}, 422, "validation_failed"),
        ({"path": "domain/handle", "trace": {"traceparent": 5}}, 422, "validation_failed"),
        ({"path": "domain/handle", "surprise": 1}, 422, "validation_failed"),
    ],
)
def test_bad_execute_requests_are_json_errors_and_write_nothing(
    ready: FlaskClient, plane: ControlPlane, body: dict[str, Any], status: int, code: str
) -> None:
    response = ready.post("/api/execute", json=body)
    assert response.status_code == status and response.get_json()["error"]["code"] == code
    assert count_rows(plane, execution) == 0


def test_batch_with_three_bad_items_among_one_hundred(ready: FlaskClient, plane: ControlPlane, topics: Topics) -> None:
    items: list[dict[str, Any]] = [{"path": "domain/handle", "workload": {"i": i}} for i in range(100)]
    items[7] = {"path": "domain/handle", "bogus": True}
    items[42] = {"path": "domain/nowhere"}
    items[99] = {"path": "domain/handle", "execution_pool": "gpu"}
    body = ready.post("/api/execute/batch", json={"executions": items}).get_json()
    assert (body["count"], body["started"], body["failed"], body["duplicates"]) == (100, 97, 3, 0)
    errors = {r["index"]: r["error"]["code"] for r in body["results"] if r["status"] == "error"}
    assert errors == {7: "validation_failed", 42: "playbook_not_found", 99: "unknown_pool"}
    assert [r["index"] for r in body["results"]] == list(range(100))
    assert count_rows(plane, execution) == 97
    assert len(topics.pull("shared", 97)) == 97


@pytest.mark.parametrize("size", [0, 1001])
def test_batch_size_outside_one_to_a_thousand_is_422(ready: FlaskClient, size: int) -> None:
    response = ready.post("/api/execute/batch", json={"executions": [{"path": "domain/handle"}] * size})
    assert response.status_code == 422


def test_sixteen_concurrent_requests_with_one_dedup_key_make_one_execution(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    request = {"path": "domain/handle", "parent_execution_id": "77", "dedup": {"key": "K1", "window_secs": 600}}

    def one(_: int) -> dict[str, Any]:
        response = ready.post("/api/execute", json=request)
        assert response.status_code == 202
        return response.get_json()  # type: ignore[no-any-return]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    statuses = sorted(r["status"] for r in results)
    assert statuses == ["duplicate"] * 15 + ["started"]
    assert len({r["execution_id"] for r in results}) == 1
    assert count_rows(plane, execution) == 1
    assert count_rows(plane, event, event.c.event_type == "subscription.message.deduplicated") == 15
    # Another subscription (parent) has its own window.
    other = ready.post("/api/execute", json={**request, "parent_execution_id": "78"}).get_json()
    assert other["status"] == "started" and other["execution_id"] != results[0]["execution_id"]


def test_same_key_twice_in_one_batch_is_a_duplicate_of_the_first(ready: FlaskClient, plane: ControlPlane) -> None:
    item = {"path": "domain/handle", "dedup": {"key": "B1"}}
    body = ready.post("/api/execute/batch", json={"executions": [item, item, {"path": "domain/handle"}]}).get_json()
    assert [r["status"] for r in body["results"]] == ["started", "duplicate", "started"]
    assert body["results"][0]["execution_id"] == body["results"][1]["execution_id"]
    assert count_rows(plane, execution) == 2


def test_an_expired_key_is_reclaimed(ready: FlaskClient, plane: ControlPlane) -> None:
    request = {"path": "domain/handle", "dedup": {"key": "K2", "window_secs": 60}}
    first = ready.post("/api/execute", json=request).get_json()
    assert ready.post("/api/execute", json=request).get_json()["status"] == "duplicate"
    with plane.engine.begin() as conn:  # the window passes
        conn.execute(text("UPDATE subscription_dedup SET expires_at = now() - interval '1 second'"))
    again = ready.post("/api/execute", json=request).get_json()
    assert again["status"] == "started" and again["execution_id"] != first["execution_id"]
    with plane.engine.begin() as conn:
        conn.execute(text("UPDATE subscription_dedup SET expires_at = now() - interval '1 second'"))
    assert plane.executions.reclaim_dedup() == 1 and count_rows(plane, subscription_dedup) == 0


def test_a_crash_between_insert_and_commit_leaves_neither_execution_nor_key(
    ready: FlaskClient, plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = {"path": "domain/handle", "dedup": {"key": "K3"}}

    def crash(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("injected crash after the execution row and the dedup key were written")

    monkeypatch.setattr(plane.store, "append_new_streams_to", crash)
    assert ready.post("/api/execute", json=request).status_code == 500
    assert count_rows(plane, execution) == 0 and count_rows(plane, subscription_dedup) == 0
    assert count_rows(plane, event, event.c.event_type.in_(["playbook.started", "command.issued"])) == 0
    assert count_rows(plane, outbox, outbox.c.topic.like(plane.settings.command_topic_prefix + "%")) == 0
    monkeypatch.undo()
    retry = ready.post("/api/execute", json=request).get_json()
    assert retry["status"] == "started" and count_rows(plane, execution) == 1


def test_a_failed_publish_stays_in_the_outbox_until_the_sweep(
    ready: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    topics.subscriber.delete_subscription(subscription=topics.subscriptions["iot"])
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path("noetl-local", plane.settings.command_topic("iot"))
    publisher.delete_topic(topic=topic)  # the iot topic is gone: publishing to it fails
    eid = ready.post("/api/execute", json={"path": "domain/handle", "execution_pool": "iot"}).get_json()["execution_id"]
    with plane.engine.connect() as conn:
        row = conn.execute(
            select(outbox.c.status, outbox.c.attempts).where(outbox.c.topic == topic.split("/")[-1])
        ).one()
    assert (row.status, row.attempts) == ("pending", 1)
    publisher.create_topic(name=topic)
    topics.subscriber.create_subscription(name=topics.subscriptions["iot"], topic=topic)
    with plane.engine.begin() as conn:  # the back-off has passed
        conn.execute(text("UPDATE outbox SET available_at = now() - interval '1 hour'"))
    swept = ready.post("/api/internal/outbox/sweep").get_json()
    assert swept["published"] == 1
    (message,) = topics.pull("iot", 1)
    assert json.loads(message.data)["execution_id"] == eid


def test_cancel_writes_one_event_and_is_idempotent(ready: FlaskClient, plane: ControlPlane) -> None:
    eid = ready.post("/api/execute", json={"path": "domain/handle"}).get_json()["execution_id"]
    first = ready.post(f"/api/executions/{eid}/cancel", json={"reason": "operator"}).get_json()
    second = ready.post(f"/api/executions/{eid}/cancel").get_json()
    assert (first["changed"], second["changed"]) == (True, False)
    detail = ready.get(f"/api/executions/{eid}").get_json()
    assert detail["status"] == "cancelled" and detail["ended_at"] and detail["event_count"] == 4
    events = ready.get(f"/api/executions/{eid}/events").get_json()["events"]
    assert events[-1]["event_type"] == "execution.cancelled" and events[-1]["payload"] == {"reason": "operator"}
    assert ready.post("/api/executions/1/cancel").status_code == 404


def test_executions_of_another_tenant_are_invisible(ready: FlaskClient, plane: ControlPlane) -> None:
    from noetl_cloud.auth.internal import InternalAuth
    from noetl_cloud.control.app import build_app
    from tests.integration.control_fixtures import TOKEN

    eid = ready.post("/api/execute", json={"path": "domain/handle"}).get_json()["execution_id"]
    other = ControlPlane(plane.settings.model_copy(update={"tenant_id": "other"}))
    try:
        client = build_app(other, InternalAuth(token=TOKEN)).test_client()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get(f"/api/executions/{eid}", headers=headers).status_code == 404
        assert client.get(f"/api/executions/{eid}/events", headers=headers).status_code == 404
    finally:
        other.engine.dispose()


def test_the_api_requires_a_caller_identity(plane: ControlPlane) -> None:
    from noetl_cloud.auth.internal import InternalAuth
    from noetl_cloud.control.app import build_app
    from tests.integration.control_fixtures import TOKEN

    client = build_app(plane, InternalAuth(token=TOKEN)).test_client()
    assert client.get("/healthz").status_code == 200
    assert client.post("/api/execute", json={}).get_json()["error"]["code"] == "missing_credentials"
    wrong = client.post("/api/execute", json={}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.get_json()["error"]["code"] == "bad_credentials"


def test_more_request_threads_than_pooled_connections_never_starve_the_pool(
    ready: FlaskClient, control_settings: Any
) -> None:
    """A request holds one pooled connection at a time: 12 threads on a pool of 2 all get through."""
    from noetl_cloud.auth.internal import InternalAuth
    from noetl_cloud.control.app import build_app
    from tests.integration.control_fixtures import TOKEN

    small = ControlPlane(
        control_settings.model_copy(update={"db_pool_size": 2, "db_max_overflow": 0, "db_pool_timeout_s": 5.0})
    )
    try:
        client = build_app(small, InternalAuth(token=TOKEN)).test_client()
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def one(i: int) -> int:
            body = {"executions": [{"path": "domain/handle", "workload": {"i": i}}]} if i % 2 else None
            if body:
                return client.post("/api/execute/batch", json=body, headers=headers).status_code
            return client.post("/api/execute", json={"path": "domain/handle"}, headers=headers).status_code

        with ThreadPoolExecutor(12) as pool:
            statuses = list(pool.map(one, range(48)))
        assert set(statuses) <= {200, 202} and len(statuses) == 48
        assert count_rows(small, execution) == 48
    finally:
        small.engine.dispose()
