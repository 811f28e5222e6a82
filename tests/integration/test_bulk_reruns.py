"""Bulk re-run against PostgreSQL: one operation over the executions a filter matches, its progress,
idempotent under retry (the same key finds the same operation, a resumed one starts none twice), bounded."""

from __future__ import annotations

import time
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.envelope import utc_now
from tests.integration.control_fixtures import playbook, register

WAIT_S = 30.0


@pytest.fixture
def ready(client: FlaskClient) -> FlaskClient:
    register(client, playbook("demo/alpha"))
    register(client, playbook("demo/beta"))
    return client


def start(client: FlaskClient, path: str, plane: ControlPlane, status: str = "failed", **extra: Any) -> str:
    response = client.post("/api/execute", json={"path": path, **extra})
    assert response.status_code == 202, response.get_json()
    eid = str(response.get_json()["execution_id"])
    with plane.engine.begin() as conn:  # ended, as the orchestrator leaves it
        conn.execute(
            text("UPDATE execution SET status = :s, ended_at = now() WHERE execution_id = :id"),
            {"s": status, "id": int(eid)},
        )
    return eid


def finished(client: FlaskClient, operation_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        op = client.get(f"/api/executions/reruns/{operation_id}").get_json()
        if op["state"] != "running" or time.monotonic() > deadline:
            return op  # type: ignore[no-any-return]
        time.sleep(0.05)


def count(plane: ControlPlane) -> int:
    with plane.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM execution")).scalar_one())


def test_failed_executions_matching_a_filter_are_rerun_once_as_one_operation(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    a1 = start(ready, "demo/alpha", plane, payload={"n": 1})
    a2 = start(ready, "demo/alpha", plane, payload={"n": 2}, execution_pool="iot")
    start(ready, "demo/beta", plane)  # another playbook
    start(ready, "demo/alpha", plane, status="completed")  # not failed
    body = {"filter": {"path": "demo/alpha"}, "idempotency_key": "ops-1"}

    answer = ready.post("/api/executions/reruns", json=body)
    assert answer.status_code == 202, answer.get_json()
    op = finished(ready, answer.get_json()["operation_id"])
    assert op["state"] == "done" and op["matched"] == 2 and op["started"] == 2 and op["failed"] == 0
    assert op["filter"] == {"path": "demo/alpha", "status": "failed"}
    assert [r["rerun_of"] for r in op["results"]] == [a1, a2]  # oldest first
    for result, n, pool in zip(op["results"], (1, 2), ("shared", "iot"), strict=True):
        detail = ready.get(f"/api/executions/{result['execution_id']}").get_json()
        assert detail["meta"]["rerun_of"] == result["rerun_of"] and detail["path"] == "demo/alpha"
        assert detail["workload"]["n"] == n and detail["execution_pool"] == pool

    before = count(plane)
    again = ready.post("/api/executions/reruns", json=body)  # a retry: the same operation, nothing new
    assert again.status_code == 200 and again.get_json()["operation_id"] == op["operation_id"]
    assert count(plane) == before

    reused = ready.post("/api/executions/reruns", json={**body, "filter": {"path": "demo/beta"}})
    assert reused.status_code == 409 and reused.get_json()["error"]["code"] == "idempotency_key_reused"


def test_a_stale_operation_resumed_by_a_retry_starts_no_rerun_twice(ready: FlaskClient, plane: ControlPlane) -> None:
    for _ in range(3):
        start(ready, "demo/beta", plane)
    body = {"filter": {"path": "demo/beta", "status": "failed"}, "idempotency_key": "ops-2"}
    op = finished(ready, ready.post("/api/executions/reruns", json=body).get_json()["operation_id"])
    assert op["started"] == 3
    with plane.engine.begin() as conn:  # as a process that died after the first re-run leaves it
        conn.execute(
            text(
                "UPDATE rerun_operation SET state = 'running', finished_at = NULL, results = "
                "jsonb_build_array(results -> 0), updated_at = now() - interval '1 hour' WHERE operation_id = :id"
            ),
            {"id": op["operation_id"]},
        )
    before = count(plane)
    assert ready.post("/api/executions/reruns", json=body).status_code == 200
    resumed = finished(ready, op["operation_id"])
    assert resumed["state"] == "done" and resumed["done"] == 3
    assert [r["status"] for r in resumed["results"]] == ["started", "duplicate", "duplicate"]
    assert [r["execution_id"] for r in resumed["results"]] == [r["execution_id"] for r in op["results"]]
    assert count(plane) == before


def test_bounds_and_bad_input_are_json_errors_with_stable_codes(ready: FlaskClient, plane: ControlPlane) -> None:
    for _ in range(3):
        start(ready, "demo/alpha", plane)
    before = count(plane)
    too_many = ready.post("/api/executions/reruns", json={"filter": {"path": "demo/alpha"}, "max": 2})
    assert too_many.status_code == 400
    error = too_many.get_json()["error"]
    assert error["code"] == "too_many_executions" and error["details"]["max"] == 2

    cases = [
        ({"filter": {"status": "started"}}, "invalid_filter"),
        ({"filter": {"colour": "red"}}, "unknown_filter"),
        ({"filter": {"version": "2"}}, "invalid_filter"),
        ({"filter": {"path": "demo/alpha", "version": "²"}}, "invalid_filter"),  # a digit to isdigit(), not to int()
        ({"filter": {"since": "yesterday"}}, "invalid_filter"),
        ({"max": 0}, "validation_failed"),  # the body's shape: 422, as every model-validated body
        ({"max": 1001}, "validation_failed"),
        ({"idempotency_key": "has space"}, "invalid_idempotency_key"),
        ({"filter": {"path": 3}}, "validation_failed"),
        ({"filter": "failed"}, "validation_failed"),
    ]
    for body, code in cases:
        answer = ready.post("/api/executions/reruns", json=body)
        assert answer.status_code == (422 if code == "validation_failed" else 400), (body, answer.get_json())
        assert answer.get_json()["error"]["code"] == code, body
    assert ready.post("/api/executions/reruns", data="nope", content_type="application/json").status_code == 400
    assert count(plane) == before

    nothing = ready.post("/api/executions/reruns", json={"filter": {"path": "demo/none"}})
    assert nothing.status_code == 202 and nothing.get_json()["state"] == "done" and nothing.get_json()["matched"] == 0
    for missing in ("0" * 32, "nope", "../x"):
        answer = ready.get(f"/api/executions/reruns/{missing}")
        assert answer.status_code == 404 and answer.get_json()["error"]["code"] in ("operation_not_found", "not_found")


def test_retention_removes_the_records_of_operations_that_ended_long_ago(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    start(ready, "demo/alpha", plane)
    kept = finished(ready, ready.post("/api/executions/reruns", json={"filter": {}}).get_json()["operation_id"])
    old = finished(ready, ready.post("/api/executions/reruns", json={"filter": {}}).get_json()["operation_id"])
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE rerun_operation SET finished_at = now() - make_interval(days => :d) WHERE operation_id = :id"),
            {"d": plane.settings.retention_days + 1, "id": old["operation_id"]},
        )
    assert plane.retention.remove_rerun_operations(utc_now()) == 1
    assert ready.get(f"/api/executions/reruns/{old['operation_id']}").status_code == 404
    assert ready.get(f"/api/executions/reruns/{kept['operation_id']}").get_json()["state"] == "done"
