"""The delivery key of a start (the ingress's replay protection, ``delivery: {key, window_secs}``),
claimed by the control plane in the start's own transaction, on real PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.models import DedupIn, ExecuteRequest
from noetl_cloud.db.schema import event, execution, subscription_dedup
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import count_rows, register
from tests.integration.replay_fixtures import chain_playbook


def start(client: FlaskClient, request: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/execute", json=request)
    assert response.status_code == 202, response.get_json()
    return response.get_json()  # type: ignore[no-any-return]


def test_sixteen_concurrent_copies_of_one_delivery_start_once_and_record_nothing_more(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    request = {
        "path": "domain/handle",
        "parent_execution_id": "77",
        "delivery": {"key": "hooks/d1", "window_secs": 360},
    }
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: start(ready, request), range(16)))
    assert sorted(r["status"] for r in results) == ["duplicate"] * 15 + ["started"]
    assert len({r["execution_id"] for r in results}) == 1
    assert count_rows(plane, execution) == 1
    # A replayed delivery writes no event (a replay must not grow the log); the ingress counts it.
    assert count_rows(plane, event, event.c.event_type == "subscription.message.deduplicated") == 0
    with plane.engine.connect() as conn:
        scope, window = conn.execute(
            text("SELECT scope, expires_at - seen_at FROM subscription_dedup WHERE dedup_key = 'hooks/d1'")
        ).one()
    assert scope.startswith("delivery/") and scope.endswith("/77") and window.total_seconds() == 360
    # Another subscription (parent) keeps its own deliveries.
    assert start(ready, {**request, "parent_execution_id": "78"})["status"] == "started"


def test_a_delivery_past_its_window_starts_again_and_the_reclaim_deletes_its_key(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    request = {"path": "domain/handle", "delivery": {"key": "hooks/d2", "window_secs": 60}}
    first = start(ready, request)
    assert start(ready, request) == {**first, "status": "duplicate"}
    with plane.engine.begin() as conn:  # the window passes
        conn.execute(text("UPDATE subscription_dedup SET expires_at = now() - interval '1 second'"))
    again = start(ready, request)
    assert again["status"] == "started" and again["execution_id"] != first["execution_id"]
    with plane.engine.begin() as conn:
        conn.execute(text("UPDATE subscription_dedup SET expires_at = now() - interval '1 second'"))
    assert plane.executions.reclaim_dedup() == 1 and count_rows(plane, subscription_dedup) == 0


def test_a_new_delivery_whose_dedup_key_is_held_points_its_delivery_key_at_the_holder(
    ready: FlaskClient, plane: ControlPlane
) -> None:
    """Two deliveries with one idempotency key: the second is the first's duplicate (a dedup event),
    and a replay of the second is answered with the first's execution too."""
    dedup = {"key": "order-1", "window_secs": 600}
    first = start(ready, {"path": "domain/handle", "dedup": dedup, "delivery": {"key": "hooks/a", "window_secs": 60}})
    second_request = {"path": "domain/handle", "dedup": dedup, "delivery": {"key": "hooks/b", "window_secs": 60}}
    second = start(ready, second_request)
    assert second == {**first, "status": "duplicate"}
    assert count_rows(plane, event, event.c.event_type == "subscription.message.deduplicated") == 1
    replayed = start(ready, second_request)
    assert replayed == {**first, "status": "duplicate"}
    assert count_rows(plane, event, event.c.event_type == "subscription.message.deduplicated") == 1  # no event
    assert count_rows(plane, execution) == 1


def test_the_same_delivery_twice_in_one_batch_starts_once(ready: FlaskClient, plane: ControlPlane) -> None:
    item = {"path": "domain/handle", "delivery": {"key": "hooks/b1"}}
    body = ready.post("/api/execute/batch", json={"executions": [item, item, {"path": "domain/handle"}]}).get_json()
    assert [r["status"] for r in body["results"]] == ["started", "duplicate", "started"]
    assert body["results"][0]["execution_id"] == body["results"][1]["execution_id"]
    assert count_rows(plane, execution) == 2


@pytest.mark.parametrize("delivery", [{"key": ""}, {"key": "k", "window_secs": 0}, {"key": "k", "extra": 1}])
def test_a_bad_delivery_key_is_a_validation_error_and_starts_nothing(
    ready: FlaskClient, plane: ControlPlane, delivery: dict[str, Any]
) -> None:
    response = ready.post("/api/execute", json={"path": "domain/handle", "delivery": delivery})
    assert response.status_code == 422 and response.get_json()["error"]["code"] == "validation_failed"
    assert count_rows(plane, execution) == 0


def test_a_delivery_started_on_a_stale_catalog_entry_runs_the_latest_version_and_keeps_one_key(
    client: FlaskClient, plane: ControlPlane, control_settings: Settings
) -> None:
    """The key is claimed by the start's write statement only while its catalog guard holds: a start
    whose cached entry went stale claims nothing, and its retry claims the key for the latest version."""
    register(client, chain_playbook("hot/keyed", 1))
    plane.executions.start_one(ExecuteRequest(path="hot/keyed"))  # caches version 1 as latest
    other = ControlPlane(control_settings)  # another instance of the execute role: its own cache
    try:
        other.catalog.register(chain_playbook("hot/keyed", 2))
    finally:
        other.relay.close()
        other.engine.dispose()
    request = ExecuteRequest(path="hot/keyed", delivery=DedupIn(key="hooks/stale", window_secs=60))
    started = plane.executions.start_one(request)
    assert started.status == "started"
    assert client.get(f"/api/executions/{started.execution_id}").get_json()["version"] == 2
    with plane.engine.connect() as conn:
        holders = conn.execute(text("SELECT execution_id FROM subscription_dedup")).scalars().all()
    assert [str(h) for h in holders] == [started.execution_id]
    again = plane.executions.start_one(request)
    assert (again.status, again.execution_id) == ("duplicate", started.execution_id)
