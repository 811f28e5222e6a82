"""The executions read API against PostgreSQL: filters, cursor pages, events after a point, follow mode."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import event as sa_event
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from tests.integration.control_fixtures import playbook, register


@pytest.fixture
def ready(client: FlaskClient) -> FlaskClient:
    register(client, playbook("demo/alpha"))
    register(client, playbook("demo/beta"))
    return client


def start(client: FlaskClient, path: str, **extra: Any) -> str:
    response = client.post("/api/execute", json={"path": path, **extra})
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["execution_id"])


def listing(client: FlaskClient, query: str = "") -> dict[str, Any]:
    response = client.get(f"/api/executions{query}")
    assert response.status_code == 200, response.get_json()
    return response.get_json()  # type: ignore[no-any-return]


def ids(body: dict[str, Any]) -> list[str]:
    return [item["execution_id"] for item in body["items"]]


def test_list_is_newest_first_and_filters_by_path_status_pool_parent_and_subscription(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    a1 = start(ready, "demo/alpha")
    b1 = start(ready, "demo/beta", execution_pool="iot")
    child = start(ready, "demo/alpha", parent_execution_id=a1, meta={"subscription_path": "subs/orders"})
    with plane.engine.begin() as conn:  # a finished one, as the orchestrator leaves it
        conn.execute(
            text("UPDATE execution SET status = 'failed', ended_at = now() WHERE execution_id = :id"), {"id": int(b1)}
        )

    assert ids(listing(ready)) == [child, b1, a1]
    assert ids(listing(ready, "?path=demo/alpha")) == [child, a1]
    assert ids(listing(ready, "?path=demo/alpha&version=1")) == [child, a1]
    assert ids(listing(ready, "?path=demo/alpha&version=2")) == []
    assert ids(listing(ready, "?status=failed")) == [b1]
    assert ids(listing(ready, "?status=failed,started")) == [child, b1, a1]
    assert ids(listing(ready, "?pool=iot")) == [b1]
    assert ids(listing(ready, f"?parent={a1}")) == [child]
    assert ids(listing(ready, "?subscription=subs/orders")) == [child]
    item = listing(ready, "?status=failed")["items"][0]
    assert item["path"] == "demo/beta" and item["execution_pool"] == "iot" and item["duration_ms"] is not None
    assert listing(ready, "?subscription=subs/orders")["items"][0]["subscription"] == "subs/orders"


def test_time_range_keeps_executions_created_in_it(ready: FlaskClient, plane: ControlPlane) -> None:
    old = start(ready, "demo/alpha")
    new = start(ready, "demo/alpha")
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE execution SET created_at = '2026-01-01T00:00:00Z' WHERE execution_id = :id"), {"id": int(old)}
        )
    assert ids(listing(ready, "?until=2026-06-01T00:00:00Z")) == [old]
    assert ids(listing(ready, "?since=2026-06-01T00:00:00%2B00:00")) == [new]
    assert ids(listing(ready, "?since=2025-12-31T00:00:00Z&until=2026-01-02T00:00:00Z")) == [old]


def test_cursor_pages_cover_every_execution_once_even_when_more_start_meanwhile(ready: FlaskClient) -> None:
    started = [start(ready, "demo/alpha") for _ in range(7)]
    first = listing(ready, "?limit=3")
    assert len(first["items"]) == 3 and first["next_cursor"]
    start(ready, "demo/alpha")  # newer than every page: never shows up in the pages that follow
    seen = ids(first)
    cursor = first["next_cursor"]
    while cursor:
        body = listing(ready, f"?limit=3&cursor={cursor}")
        seen += ids(body)
        cursor = body["next_cursor"]
    assert seen == list(reversed(started))


def test_a_page_is_one_statement_whatever_the_filters(ready: FlaskClient, plane: ControlPlane) -> None:
    for _ in range(3):
        start(ready, "demo/alpha")
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    sa_event.listen(plane.engine, "before_cursor_execute", count)
    try:
        body = listing(ready, "?limit=2&path=demo/alpha&status=started&pool=shared&since=2020-01-01T00:00:00Z")
        listing(ready, f"?limit=2&cursor={body['next_cursor']}")
    finally:
        sa_event.remove(plane.engine, "before_cursor_execute", count)
    assert len([s for s in statements if "FROM execution" in s]) == 2


@pytest.mark.parametrize(
    ("query", "code", "parameter"),
    [
        ("?status=running", "invalid_filter", "status"),
        ("?colour=red", "unknown_filter", "colour"),
        ("?version=2", "invalid_filter", "version"),
        ("?path=a&version=x", "invalid_filter", "version"),
        ("?pool=Not%20A%20Pool", "invalid_filter", "pool"),
        ("?parent=abc", "invalid_filter", "parent"),
        ("?since=yesterday", "invalid_filter", "since"),
        ("?since=2026-01-01T00:00:00", "invalid_filter", "since"),
        ("?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "invalid_filter", "until"),
        ("?limit=0", "invalid_filter", "limit"),
        ("?limit=501", "invalid_filter", "limit"),
        ("?cursor=not-a-cursor", "invalid_cursor", "cursor"),
    ],
)
def test_an_invalid_filter_is_400_with_a_stable_code(
    client: FlaskClient, query: str, code: str, parameter: str
) -> None:
    response = client.get(f"/api/executions{query}")
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == code and error["details"] == {"parameter": parameter}


def test_events_after_an_event_return_only_the_later_ones(ready: FlaskClient) -> None:
    eid = start(ready, "demo/alpha")
    everything = ready.get(f"/api/executions/{eid}/events").get_json()
    types = [e["event_type"] for e in everything["events"]]
    assert types[:3] == ["playbook.started", "step.started", "command.issued"]
    assert everything["status"] == "started" and everything["ended"] is False
    positions = [e["position"] for e in everything["events"]]
    assert positions == sorted(positions)
    first = everything["events"][0]["event_id"]
    later = ready.get(f"/api/executions/{eid}/events?after={first}").get_json()
    assert [e["event_id"] for e in later["events"]] == [e["event_id"] for e in everything["events"][1:]]
    last = everything["next_after"]
    assert last == everything["events"][-1]["event_id"]
    assert ready.get(f"/api/executions/{eid}/events?after={last}").get_json()["events"] == []


def test_events_refuse_an_after_of_another_execution_and_a_bad_wait(ready: FlaskClient) -> None:
    one, other = start(ready, "demo/alpha"), start(ready, "demo/alpha")
    foreign = ready.get(f"/api/executions/{other}/events").get_json()["events"][0]["event_id"]
    response = ready.get(f"/api/executions/{one}/events?after={foreign}")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_after"
    for wait in ("-1", "abc", "26"):
        response = ready.get(f"/api/executions/{one}/events?wait={wait}")
        assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_wait"
    assert ready.get("/api/executions/12345/events").status_code == 404
    assert ready.get("/api/executions/12345").get_json()["error"]["code"] == "execution_not_found"


def test_follow_mode_answers_when_an_event_is_appended(ready: FlaskClient, plane: ControlPlane) -> None:
    eid = start(ready, "demo/alpha")
    last = ready.get(f"/api/executions/{eid}/events").get_json()["next_after"]
    polled = threading.Event()
    queries = plane.execution_queries
    real_sleep = queries._sleep

    def sleep(seconds: float) -> None:  # the long poll found nothing yet: append while it waits
        polled.set()
        real_sleep(seconds)

    queries._sleep = sleep
    answer: dict[str, Any] = {}
    follower = threading.Thread(
        target=lambda: answer.update(ready.get(f"/api/executions/{eid}/events?after={last}&wait=20").get_json())
    )
    follower.start()
    assert polled.wait(20)
    assert ready.post(f"/api/executions/{eid}/cancel", json={"reason": "test"}).status_code == 200
    follower.join(30)
    assert [e["event_type"] for e in answer["events"]] == ["execution.cancelled"]
    assert answer["status"] == "cancelled" and answer["ended"] is True


def test_follow_mode_of_an_ended_execution_answers_at_once(ready: FlaskClient, plane: ControlPlane) -> None:
    eid = start(ready, "demo/alpha")
    ready.post(f"/api/executions/{eid}/cancel", json={})
    last = ready.get(f"/api/executions/{eid}/events").get_json()["next_after"]
    plane.execution_queries._sleep = lambda _s: pytest.fail("an ended execution must not be waited on")
    body = ready.get(f"/api/executions/{eid}/events?after={last}&wait=20").get_json()
    assert body["events"] == [] and body["ended"] is True and body["next_after"] == last


def test_rerun_starts_a_linked_execution_with_the_same_input_and_refuses_a_running_one(ready: FlaskClient) -> None:
    eid = start(ready, "demo/alpha", payload={"n": 7}, execution_pool="iot", meta={"subscription_path": "subs/a"})
    refused = ready.post(f"/api/executions/{eid}/rerun")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "execution_not_ended"
    ready.post(f"/api/executions/{eid}/cancel", json={})

    answer = ready.post(f"/api/executions/{eid}/rerun")
    assert answer.status_code == 202
    new = answer.get_json()
    assert new["rerun_of"] == eid and new["execution_id"] != eid and new["execution_pool"] == "iot"
    detail = ready.get(f"/api/executions/{new['execution_id']}").get_json()
    assert detail["meta"] == {"subscription_path": "subs/a", "rerun_of": eid}
    assert detail["path"] == "demo/alpha" and detail["status"] == "started"
    started = ready.get(f"/api/executions/{new['execution_id']}/events").get_json()["events"][0]
    assert started["event_type"] == "playbook.started" and started["payload"]["workload"] == {"n": 7}
    assert ready.get(f"/api/executions/{eid}").get_json()["status"] == "cancelled"  # the old one is unchanged
    assert ready.post("/api/executions/12345/rerun").status_code == 404
