"""The projector's push endpoint: duplicated and shuffled deliveries converge to the fold of the log;
push authentication; lag and last applied event; drift named by verify; refolds on a new registry."""

from __future__ import annotations

import json
import random
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.projector.bootstrap import ProjectorRole
from tests.integration.control_fixtures import register
from tests.integration.distributed_driver import Driver, golden_content
from tests.integration.replay_fixtures import API_HEADERS, PUSH_TOKEN, EventsTopic, chain_playbook, push_body

SCOPE = {"tenant_id": "acme", "organization_id": "ops"}


def _push(client: FlaskClient, message: Any) -> Any:
    body = push_body(json.loads(message.data), dict(message.attributes))
    return client.post(f"/?token={PUSH_TOKEN}", json=body)


def _verify(client: FlaskClient, eid: str) -> dict[str, Any]:
    response = client.get("/api/replay/verify", query_string={**SCOPE, "execution_id": eid})
    assert response.status_code == 200, response.get_json()
    return response.get_json()  # type: ignore[no-any-return]


def _checksums(plane: ControlPlane, eid: str) -> dict[str, str]:
    with plane.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT projection_type, checksum FROM projection WHERE execution_id = :e"), {"e": int(eid)}
        )
        return dict(rows.all())  # type: ignore[arg-type]


def test_duplicated_and_shuffled_deliveries_converge_to_the_fold_of_the_log(
    rclient: FlaskClient,
    rplane: ControlPlane,
    events_topic: EventsTopic,
    projector_client: FlaskClient,
) -> None:
    register(rclient, golden_content("loop_parallel", "golden/loop_parallel"))
    register(rclient, chain_playbook("projector/chain", 4))
    driver = Driver(rclient, rplane.engine, seed=11)
    executions = [driver.start("golden/loop_parallel"), driver.start("projector/chain")]
    for eid in executions:
        driver.run_to_end(eid)
    counts = {eid: len(rclient.get(f"/api/executions/{eid}/events").get_json()["events"]) for eid in executions}
    messages: list[Any] = []  # the writers publish one message per execution per write
    while sum(json.loads(m.data)["events"] for m in messages) < sum(counts.values()):
        pulled = [m for m in events_topic.pull(1) if json.loads(m.data)["execution_id"]]
        assert pulled, "the events topic ran dry before every event was covered"
        messages += pulled
    assert sum(json.loads(m.data)["events"] for m in messages) == sum(counts.values())  # covering every event once

    seen: list[dict[str, str]] = []
    for seed in (1, 2):
        with rplane.engine.begin() as conn:
            conn.execute(text("DELETE FROM projection"))
            conn.execute(text("DELETE FROM projection_snapshot"))
        deliveries = messages + random.Random(seed).sample(messages, len(messages) // 2)  # duplicates
        random.Random(seed * 7).shuffle(deliveries)  # and any order within (and across) executions
        outcomes = [_push(projector_client, m) for m in deliveries]
        assert {r.status_code for r in outcomes} == {200}
        kinds = [r.get_json()["outcome"] for r in outcomes]
        assert kinds.count("applied") <= 2 * len(executions) and "duplicate" in kinds
        applied = sum(r.get_json().get("applied", 0) for r in outcomes)
        assert applied == sum(counts.values())  # every event folded exactly once per execution
        for eid in executions:
            report = _verify(rclient, eid)
            assert report["ok"] and report["drift"] == [] and report["events_behind"] == 0, report
        seen.append({eid: json.dumps(_checksums(rplane, eid), sort_keys=True) for eid in executions})
    assert seen[0] == seen[1]


def test_push_needs_its_credentials_and_a_message_naming_an_event(
    projector_client: FlaskClient, rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic
) -> None:
    body = push_body({"event_id": "1", "execution_id": "2"})
    assert projector_client.post("/", json=body).status_code == 401
    assert projector_client.post("/?token=wrong", json=body).status_code == 401
    unknown = projector_client.post(f"/?token={PUSH_TOKEN}", json=body)
    assert (unknown.status_code, unknown.get_json()["outcome"]) == (200, "unknown_event")  # acked: nothing here
    bad = projector_client.post(f"/?token={PUSH_TOKEN}", json=push_body({"hello": "world"}))
    assert (bad.status_code, bad.get_json()["error"]["code"]) == (400, "invalid_notification")
    header = projector_client.post("/", json=body, headers={"Authorization": f"Bearer {PUSH_TOKEN}"})
    assert header.status_code == 200
    register(rclient, chain_playbook("projector/catalog-event", 1))  # a catalog event has no execution
    with rplane.engine.begin() as conn:  # its writer leaves it to the sweep
        conn.execute(text("UPDATE outbox SET available_at = now() - interval '1 hour'"))
    assert rclient.post("/api/internal/outbox/sweep").get_json()["events_published"] == 1
    (catalog_event,) = [m for m in events_topic.pull(1) if not json.loads(m.data)["execution_id"]]
    assert _push(projector_client, catalog_event).get_json()["outcome"] == "no_execution"


def test_lag_and_the_last_applied_event_are_exposed_and_drift_is_named(
    rclient: FlaskClient,
    rplane: ControlPlane,
    events_topic: EventsTopic,
    projector_client: FlaskClient,
    projector_role: ProjectorRole,
) -> None:
    register(rclient, chain_playbook("projector/lag", 2))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/lag")
    started = len(rclient.get(f"/api/executions/{eid}/events").get_json()["events"])
    first = [m for m in events_topic.pull(started) if json.loads(m.data)["execution_id"] == eid]
    assert _push(projector_client, first[0]).get_json()["outcome"] == "applied"
    driver.run_to_end(eid)
    behind = projector_client.get(
        "/api/projector/status", query_string={**SCOPE, "execution_id": eid}, headers=API_HEADERS
    ).get_json()
    assert behind["events_behind"] > 0 and behind["lag_ms"] >= 0
    drift = _verify(rclient, eid)
    assert not drift["ok"] and set(drift["drift"]) >= {"execution", "commands"}  # the projection is behind
    done = projector_role.projector.project("acme", "ops", eid)
    status = projector_client.get(
        "/api/projector/status", query_string={**SCOPE, "execution_id": eid}, headers=API_HEADERS
    ).get_json()
    assert status["events_behind"] == 0 and status["last_applied_event_id"] == done.event_id
    overall = projector_client.get("/api/projector/status", headers=API_HEADERS).get_json()
    assert overall["last_applied_event_id"] == done.event_id and overall["process"]["applied_events"] > 0
    assert _verify(rclient, eid)["ok"]

    with rplane.engine.begin() as conn:  # someone edits a live row: verify names that surface only
        conn.execute(
            text(
                "UPDATE projection SET state = jsonb_set(state, '{0,status}', '\"forged\"') "
                "WHERE execution_id = :e AND projection_type = 'execution'"
            ),
            {"e": int(eid)},
        )
        conn.execute(
            text("UPDATE projection SET checksum = 'forged' WHERE execution_id = :e AND projection_type = 'loops'"),
            {"e": int(eid)},
        )
    report = _verify(rclient, eid)
    assert report["drift"] == ["loops"] or report["drift"] == ["execution", "loops"]


def test_a_projection_folded_with_another_registry_is_refolded_from_the_first_event(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    register(rclient, chain_playbook("projector/registry", 2))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/registry")
    driver.run_to_end(eid)
    projector_role.projector.project("acme", "ops", eid)
    with rplane.engine.begin() as conn:
        conn.execute(text("UPDATE projection SET upcaster_registry_digest = 'retired', version = version + 100"))
    again = projector_role.projector.project("acme", "ops", eid)
    assert again.refolded and again.applied > 0
    assert _verify(rclient, eid)["ok"]


def _age_execution(plane: ControlPlane, eid: str, seconds: int) -> None:
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE execution SET updated_at = now() - make_interval(secs => :s) WHERE execution_id = :e"),
            {"s": seconds, "e": int(eid)},
        )


def test_catch_up_folds_the_executions_whose_deliveries_were_lost(
    rclient: FlaskClient,
    rplane: ControlPlane,
    events_topic: EventsTopic,
    projector_client: FlaskClient,
) -> None:
    register(rclient, chain_playbook("projector/lost", 3))
    driver = Driver(rclient, rplane.engine, seed=5)

    def events_of(*eids: str) -> int:
        return sum(len(rclient.get(f"/api/executions/{eid}/events").get_json()["events"]) for eid in eids)

    partly = driver.start("projector/lost")
    first = [m for m in events_topic.pull(events_of(partly)) if json.loads(m.data)["execution_id"]]
    assert _push(projector_client, first[0]).get_json()["outcome"] == "applied"  # folds its start
    lost, busy = driver.start("projector/lost"), driver.start("projector/lost")
    for eid in (partly, lost, busy):
        driver.run_to_end(eid)
    # No other delivery reaches the projector: the broker lost them. ``busy`` is still being written to.
    for eid in (lost, partly):
        _age_execution(rplane, eid, 60)  # quieter than NOETL_PROJECTOR_CATCHUP_SETTLE_S (30)
    for eid in (lost, partly):
        assert _verify(rclient, eid)["events_behind"] > 0

    answer = projector_client.post("/api/internal/projector/catch-up", headers=API_HEADERS)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json() == {"behind": 2, "applied": 2}
    for eid in (lost, partly):
        report = _verify(rclient, eid)
        assert report["ok"] and report["events_behind"] == 0, report
    assert _verify(rclient, busy)["events_behind"] > 0  # not settled yet: its deliveries may be on their way
    assert projector_client.post("/api/internal/projector/catch-up", headers=API_HEADERS).get_json() == {
        "behind": 0,
        "applied": 0,
    }
    assert projector_client.post("/api/internal/projector/catch-up").status_code == 401
