"""The orchestrator on PostgreSQL: golden playbooks run command by command through the API reach the
in-process runner's final status, ctx and results; claims, reports and the reaper keep their guarantees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from tests.integration.control_fixtures import Topics, playbook, register
from tests.integration.distributed_driver import PLAYBOOKS, Driver, golden_content

GOLDENS = sorted(
    p.name.removesuffix(".yaml") for p in PLAYBOOKS.glob("*.yaml") if not p.name.endswith(".expected.yaml")
)


def _fill(value: Any, url: str) -> Any:
    if isinstance(value, str):
        return value.replace("{api}", url)
    if isinstance(value, dict):
        return {key: _fill(item, url) for key, item in value.items()}
    return value


@pytest.fixture
def driver(client: FlaskClient, plane: ControlPlane, topics: Topics) -> Iterator[Driver]:
    register(client, golden_content("children/double", "children/double"))
    register(client, golden_content("children/rooms", "children/rooms"))
    yield Driver(client, plane.engine)


def _types(client: FlaskClient, execution_id: str) -> list[str]:
    events = client.get(f"/api/executions/{execution_id}/events").get_json()["events"]
    return [e["event_type"] for e in events]


@pytest.mark.parametrize("name", GOLDENS)
def test_golden_playbook_distributed_matches_the_in_process_runner(
    name: str,
    driver: Driver,
    client: FlaskClient,
    api: str,
) -> None:
    expected = yaml.safe_load((PLAYBOOKS / f"{name}.expected.yaml").read_text())
    register(client, golden_content(name, f"golden/{name}"))
    eid = driver.start(f"golden/{name}", _fill(expected.get("workload") or {}, api))
    detail = driver.run_to_end(eid)
    assert detail["status"] == expected["status"], detail["error"]
    if name == "parallel_set_ctx_conflict":  # which iteration loses the race is the order of the reports
        assert detail["results"]["resolve"] in (f"ctx_conflict on winner in iteration {i}" for i in (0, 1))
        assert detail["results"]["start"] in (["a", None], [None, "b"])  # the loser's result is None
        assert detail["ctx"]["mode"] == "same" and detail["ctx"]["winner"] in ("a", "b")
        return
    assert detail["results"] == expected["results"]
    assert detail["ctx"] == expected["ctx"]
    # the same engine events, once the command lifecycle is set aside; branches interleave differently
    # here, and a child playbook's events are in the child's own stream
    types = [t for t in _types(client, eid) if not t.startswith("command.")]
    if name not in ("sub_playbook", "nested_loop_parent"):
        assert sorted(types) == sorted(expected["events"])


def test_every_command_is_issued_claimed_started_and_ended_once(driver: Driver, client: FlaskClient) -> None:
    register(client, golden_content("loop_sequential", "golden/loop_sequential"))
    eid = driver.start("golden/loop_sequential")
    driver.run_to_end(eid)
    events = client.get(f"/api/executions/{eid}/events").get_json()["events"]
    lifecycle: dict[str, list[str]] = {}
    for e in events:
        if e["event_type"].startswith("command."):
            lifecycle.setdefault(e["payload"]["command_id"], []).append(e["event_type"])
    assert lifecycle and all(
        steps == ["command.issued", "command.claimed", "command.started", "command.completed"]
        for steps in lifecycle.values()
    ), lifecycle


def test_a_second_claim_is_refused_and_a_duplicate_report_changes_nothing(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(client, golden_content("exclusive_routing", "golden/exclusive_routing"))
    eid = driver.start("golden/exclusive_routing")
    (command_id,) = driver.issued(eid)
    body = driver.run_one(command_id)
    again = driver.claim(command_id)
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "command_already_claimed"
    before = _types(client, eid)
    duplicate = client.post("/api/events", json=body)
    assert duplicate.status_code == 200 and duplicate.get_json()["duplicate"] is True
    assert _types(client, eid) == before


def test_a_report_from_a_worker_without_the_lease_is_refused(driver: Driver, client: FlaskClient) -> None:
    register(client, golden_content("exclusive_routing", "golden/exclusive_routing"))
    eid = driver.start("golden/exclusive_routing")
    (command_id,) = driver.issued(eid)
    command = driver.claim(command_id).get_json()
    stranger = {"command_id": command_id, "worker_id": "someone-else", "attempt": command["attempt"], "status": "ok"}
    answer = client.post("/api/events", json=stranger)
    assert answer.status_code == 409 and answer.get_json()["error"]["code"] == "lease_lost"
    beat = client.post(f"/api/commands/{command_id}/heartbeat", json={"worker_id": "someone-else"})
    assert beat.status_code == 409 and beat.get_json()["error"]["code"] == "lease_lost"
    mine = client.post(f"/api/commands/{command_id}/heartbeat", json={"worker_id": driver.worker_id})
    assert mine.status_code == 200 and mine.get_json()["lease_expires_at"]


def test_a_worker_may_not_report_control_plane_events(driver: Driver, client: FlaskClient) -> None:
    register(client, golden_content("exclusive_routing", "golden/exclusive_routing"))
    eid = driver.start("golden/exclusive_routing")
    (command_id,) = driver.issued(eid)
    command = driver.claim(command_id).get_json()
    forged = {
        "command_id": command_id,
        "worker_id": driver.worker_id,
        "attempt": command["attempt"],
        "status": "ok",
        "events": [{"event_type": "playbook.completed", "payload": {}}],
    }
    answer = client.post("/api/events", json=forged)
    assert answer.status_code == 422 and answer.get_json()["error"]["code"] == "event_type_not_allowed"
    assert driver.status(eid)["status"] == "started"


def test_claiming_a_command_of_a_cancelled_execution_cancels_it(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(client, golden_content("exclusive_routing", "golden/exclusive_routing"))
    eid = driver.start("golden/exclusive_routing")
    (command_id,) = driver.issued(eid)
    assert client.post(f"/api/executions/{eid}/cancel").status_code == 200
    refused = driver.claim(command_id)
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "execution_terminal"
    with plane.engine.connect() as conn:
        status = conn.execute(text("SELECT status FROM command WHERE command_id = :id"), {"id": int(command_id)})
        assert status.scalar_one() == "cancelled"


def test_unknown_command_is_404(client: FlaskClient) -> None:
    answer = client.post("/api/commands/123/claim", json={"worker_id": "w"})
    assert answer.status_code == 404 and answer.get_json()["error"]["code"] == "command_not_found"
    assert client.get("/api/commands/123").get_json()["error"]["code"] == "command_not_found"
    bad = client.post("/api/events", json={"command_id": "x"})
    assert bad.status_code == 422 and bad.get_json()["error"]["code"] == "validation_failed"


def _expire(plane: ControlPlane, command_id: str) -> None:
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE command SET lease_expires_at = now() - interval '1 second' WHERE command_id = :id"),
            {"id": int(command_id)},
        )


def test_the_reaper_reissues_an_expired_claim_and_the_execution_completes(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(client, golden_content("exclusive_routing", "golden/exclusive_routing"))
    eid = driver.start("golden/exclusive_routing")
    (command_id,) = driver.issued(eid)
    assert driver.claim(command_id).status_code == 200  # this worker then dies
    _expire(plane, command_id)
    assert client.post("/api/internal/reaper").get_json() == {"expired": 1, "reissued": 1, "failed": 0, "renotified": 0}
    assert driver.issued(eid) == [command_id]
    command = client.get(f"/api/commands/{command_id}").get_json()
    assert command["attempt"] == 2 and command["status"] == "issued"
    detail = driver.run_to_end(eid)
    assert detail["status"] == "completed"
    issued = [
        e
        for e in client.get(f"/api/executions/{eid}/events").get_json()["events"]
        if e["event_type"] == "command.issued" and e["payload"]["command_id"] == command_id
    ]
    assert [e["payload"]["attempt"] for e in issued] == [1, 2]
    assert issued[1]["payload"]["reason"] == "lease_expired"


def test_the_reaper_fails_a_command_out_of_attempts_and_routes_step_failed(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(client, playbook("domain/handle"))
    eid = driver.start("domain/handle")
    (command_id,) = driver.issued(eid)
    for _ in range(3):  # NOETL_COMMAND_MAX_ATTEMPTS defaults to 3
        assert driver.claim(command_id).status_code == 200
        _expire(plane, command_id)
        client.post("/api/internal/reaper")
    detail = driver.status(eid)
    assert detail["status"] == "failed"
    assert detail["error"]["kind"] == "step_failed" and detail["error"]["error"]["kind"] == "lease_expired"


def _age(plane: ControlPlane, command_id: str, seconds: int) -> None:
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE command SET updated_at = now() - make_interval(secs => :s) WHERE command_id = :id"),
            {"s": seconds, "id": int(command_id)},
        )


def test_the_reaper_publishes_again_the_notification_of_a_command_nobody_claimed(
    driver: Driver, client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    register(client, playbook("domain/handle"))
    eid = driver.start("domain/handle")
    claimed_eid = driver.start("domain/handle")
    (command_id,) = driver.issued(eid)
    (claimed_id,) = driver.issued(claimed_eid)
    assert sorted(m.attributes["command_id"] for m in topics.pull("shared", 2)) == sorted([command_id, claimed_id])
    assert driver.claim(claimed_id).status_code == 200  # claimed: its notification did its job
    _age(plane, claimed_id, 3600)

    _age(plane, command_id, 299)  # NOETL_COMMAND_RENOTIFY_AFTER_S defaults to 300
    assert client.post("/api/internal/reaper").get_json()["renotified"] == 0
    _age(plane, command_id, 301)  # the notification was lost: nobody claimed it in time
    assert client.post("/api/internal/reaper").get_json()["renotified"] == 1
    (again,) = topics.pull("shared", 1)
    assert again.attributes["command_id"] == command_id and again.attributes["execution_id"] == eid
    assert client.post("/api/internal/reaper").get_json()["renotified"] == 0  # once a period, not every run
    assert json.loads(again.data) == {  # built again from the command and its execution
        "execution_id": eid,
        "command_id": command_id,
        "event_id": again.attributes["event_id"],
        "step": "start",
        "attempt": 1,
    }
    with plane.engine.connect() as conn:
        left = conn.execute(
            text(
                "SELECT count(*) FROM outbox o JOIN command c ON o.event_id = c.issued_event_id "
                "WHERE c.command_id = :id AND o.topic LIKE :commands"
            ),
            {"id": int(command_id), "commands": plane.settings.command_topic_prefix + "%"},
        ).scalar_one()
    assert left == 0  # published rows are deleted; the renotification writes none
    assert driver.run_to_end(eid)["status"] == "completed"  # the renotified command runs as usual


def test_a_child_runs_on_its_parents_pool_unless_the_request_names_one(driver: Driver, client: FlaskClient) -> None:
    register(client, playbook("domain/handle"))
    parent = driver.start("domain/handle", execution_pool="iot")
    child = driver.start("domain/handle", parent_execution_id=parent)
    named = driver.start("domain/handle", parent_execution_id=parent, execution_pool="shared")
    pools = [driver.status(eid)["execution_pool"] for eid in (parent, child, named)]
    assert pools == ["iot", "iot", "shared"]
