"""The projector's push endpoint: duplicated and shuffled deliveries converge to the fold of the log;
push authentication; lag and last applied event; drift named by verify; refolds on a new registry."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import event, text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.projector import catchup
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.replay.service import Cutoff
from tests.integration.control_fixtures import register
from tests.integration.distributed_driver import ENDED, Driver, golden_content
from tests.integration.replay_fixtures import (
    API_HEADERS,
    PUSH_TOKEN,
    EventsTopic,
    chain_playbook,
    last_event,
    push_body,
)

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
            text("SELECT projection_type, encode(checksum, 'hex') FROM projection WHERE execution_id = :e"),
            {"e": int(eid)},
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
            conn.execute(text("DELETE FROM projection_tracking"))
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


def test_a_bundle_folds_every_execution_it_names_and_its_redelivery_is_all_duplicates(
    rclient: FlaskClient,
    rplane: ControlPlane,
    events_topic: EventsTopic,
    projector_client: FlaskClient,
) -> None:
    """A settle's bundle (``{"deliveries": [...]}``) names several executions: one push folds each to
    its tip on the role's fold threads, and answers once every fold has committed."""
    register(rclient, chain_playbook("projector/bundled", 3))
    driver = Driver(rclient, rplane.engine, seed=5)
    executions = [driver.start("projector/bundled") for _ in range(4)]
    for eid in executions:
        driver.run_to_end(eid)
    with rplane.engine.connect() as conn:
        tips = dict(
            conn.execute(
                text(
                    "SELECT execution_id::text, max(event_id)::text FROM event WHERE execution_id = ANY(:e) GROUP BY 1"
                ),
                {"e": [int(e) for e in executions]},
            ).all()
        )
    bundle = {"deliveries": [{"event_id": tips[e], "execution_id": e, "events": 1} for e in executions]}
    first = projector_client.post(f"/?token={PUSH_TOKEN}", json=push_body(bundle, {"deliveries": "4"}))
    assert first.status_code == 200, first.get_json()
    answer = first.get_json()
    assert answer["deliveries"] == 4 and {r["outcome"] for r in answer["results"]} == {"applied"}
    for eid in executions:
        report = _verify(rclient, eid)
        assert report["ok"] and report["events_behind"] == 0, report
    again = projector_client.post(f"/?token={PUSH_TOKEN}", json=push_body(bundle, {"deliveries": "4"})).get_json()
    assert [r["outcome"] for r in again["results"]] == ["duplicate"] * 4


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
    assert rclient.post("/api/internal/outbox/sweep").get_json()["events_published"] == 0  # published at its commit
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
    # The first notification is all this needs (the topic carries fewer messages than the execution has
    # events: waiting for one per event waited out the pull's 30 s).
    first = [m for m in events_topic.pull(1) if json.loads(m.data)["execution_id"] == eid]
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
            text("UPDATE projection SET checksum = '\\x00' WHERE execution_id = :e AND projection_type = 'commands'"),
            {"e": int(eid)},
        )
    report = _verify(rclient, eid)
    assert report["drift"] == ["commands"] or report["drift"] == ["execution", "commands"]
    # The empty surfaces have no row: their live checksum is the empty surface's, and they do not drift.
    assert report["live"]["projection_checksums"]["loops"] == report["replayed"]["projection_checksums"]["loops"]
    with rplane.engine.begin() as conn:  # a row the tracking row lists goes missing: that surface drifts
        conn.execute(
            text("DELETE FROM projection WHERE execution_id = :e AND projection_type = 'stages'"), {"e": int(eid)}
        )
    assert "stages" in _verify(rclient, eid)["drift"]


def test_a_projection_folded_with_another_registry_is_refolded_from_the_first_event(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    register(rclient, chain_playbook("projector/registry", 2))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/registry")
    driver.run_to_end(eid)
    projector_role.projector.project("acme", "ops", eid)
    with rplane.engine.begin() as conn:
        conn.execute(text("UPDATE projection SET upcaster_registry_digest = '\\x0bad', version = version + 100"))
    again = projector_role.projector.project("acme", "ops", eid)
    assert again.refolded and again.applied > 0
    assert _verify(rclient, eid)["ok"]


def test_a_delivery_folds_its_batch_onto_the_surfaces_it_touches_and_a_duplicate_reads_no_projection_state(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    register(rclient, chain_playbook("projector/live", 4))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/live")
    projector = projector_role.projector
    results = [projector.handle(last_event(rplane, eid))]  # the projector keeps up: one delivery per write
    claim = driver.claim

    def claim_and_deliver(command_id: str) -> Any:
        answer = claim(command_id)
        results.append(projector.handle(last_event(rplane, eid)))  # the claim's write: command.claimed
        return answer

    driver.claim = claim_and_deliver  # type: ignore[method-assign]
    while driver.status(eid)["status"] not in ENDED:
        (command,) = driver.issued(eid)
        driver.run_one(command)
        results.append(projector.handle(last_event(rplane, eid)))
    assert [r.outcome for r in results] == ["applied"] * len(results)
    # A first fold writes the row kinds that have rows; the empty surfaces get none.
    assert results[0].surfaces == ["execution", "stages", "commands"]
    claims, reports = results[1::2], results[2::2]
    assert claims and all(r.surfaces == ["commands"] for r in claims)
    turns = [set(r.surfaces or ()) for r in reports]
    assert turns and all(kinds <= {"execution", "stages", "loops", "commands"} for kinds in turns)
    assert sum(r.snapshots for r in reports) == 1  # a snapshot's batch loads every kind, writes those it changes
    with rplane.engine.connect() as conn:
        versions = dict(
            conn.execute(
                text("SELECT projection_type, version FROM projection WHERE execution_id = :e"), {"e": int(eid)}
            ).all()
        )
        tracked = conn.execute(
            text("SELECT version FROM projection_tracking WHERE execution_id = :e"), {"e": int(eid)}
        ).scalar_one()
    assert versions["execution"] == tracked
    assert set(versions) == {"execution", "stages", "commands"}  # the empty surfaces have no row
    assert _verify(rclient, eid)["ok"]

    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(" ".join(statement.split()))

    engines = (projector_role.engine, projector_role.reader)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        again = projector.handle(last_event(rplane, eid))
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)
    assert again.outcome == "duplicate" and again.position == results[-1].position
    reads = [s for s in statements if s.upper().startswith("SELECT")]
    assert len(statements) == len(reads) == 1, statements  # the event joined with its tracking row: nothing else
    assert "FROM event d LEFT JOIN projection_tracking t" in reads[0] and "d.event_id =" in reads[0]
    assert not [s for s in statements if "projection " in s or "projection_snapshot" in s or "lock" in s.lower()]


def test_snapshots_are_pruned_to_the_newest_and_the_anchors_and_stored_compressed(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    register(rclient, chain_playbook("projector/snapshots", 40))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/snapshots")
    projector = projector_role.projector
    snapshots = 0
    while driver.status(eid)["status"] not in ENDED:  # live: a delivery per write, snapshots as the count passes
        (command,) = driver.issued(eid)
        driver.run_one(command)
        snapshots += projector.handle(last_event(rplane, eid)).snapshots
    with rplane.engine.connect() as conn:
        kept = conn.execute(
            text(
                "SELECT event_count, state, octet_length(state_compressed) AS size FROM projection_snapshot "
                "WHERE execution_id = :e ORDER BY position"
            ),
            {"e": int(eid)},
        ).all()
        raw = conn.execute(
            text("SELECT sum(octet_length(state::text)) FROM projection WHERE execution_id = :e"), {"e": int(eid)}
        ).scalar_one()
    counts = [r.event_count for r in kept]
    assert snapshots > 5 and len(kept) < snapshots  # written as the count passed each multiple, most pruned
    newest = sorted({25 * k for k in range(1, snapshots + 1)})[-3:]
    assert counts == sorted({*(c for c in range(100, newest[-1] + 1, 100)), *newest})
    assert all(r.state is None for r in kept) and kept[-1].size < raw / 3  # compact: zlib, not JSONB
    replay = rplane.replay
    for position_of in counts:  # each kept snapshot seeds replay to the full fold's checksums
        with rplane.engine.connect() as conn:
            position = conn.execute(
                text("SELECT position FROM projection_snapshot WHERE execution_id = :e AND event_count = :n"),
                {"e": int(eid), "n": position_of},
            ).scalar_one()
        seeded = replay.replay("acme", "ops", eid, Cutoff(position=int(position)))
        full = replay.replay("acme", "ops", eid, Cutoff(position=int(position)), use_snapshots=False)
        assert seeded.seeded_from == position and seeded.state.checksum() == full.state.checksum()


def test_catch_up_folds_only_the_lagging_executions_among_the_events_written_since_its_last_run(
    rclient: FlaskClient,
    rplane: ControlPlane,
    events_topic: EventsTopic,
    projector_client: FlaskClient,
    projector_role: ProjectorRole,
) -> None:
    register(rclient, chain_playbook("projector/lost", 3))
    driver = Driver(rclient, rplane.engine, seed=5)
    projector = projector_role.projector
    current, partly, lost = (driver.start("projector/lost") for _ in range(3))
    assert projector.handle(last_event(rplane, partly)).outcome == "applied"  # folds its start only
    for eid in (current, partly, lost):
        driver.run_to_end(eid)
    assert projector.project("acme", "ops", current).outcome == "applied"  # its deliveries all arrived
    # No other delivery reaches the projector: the broker lost them.
    for eid in (partly, lost):
        assert _verify(rclient, eid)["events_behind"] > 0

    # The first run looks from the window's first execution up to what was stored before the settle time
    # (nothing yet) and notes the tip; the next run looks at the range up to that tip once it settled.
    assert projector.catch_up("acme", "ops", window_s=3600, settle_s=3600) == {"behind": 0, "applied": 0}
    assert projector.catch_up("acme", "ops", window_s=3600, settle_s=0) == {"behind": 2, "applied": 2}
    for eid in (partly, lost):
        report = _verify(rclient, eid)
        assert report["ok"] and report["events_behind"] == 0, report

    late = driver.start("projector/lost")  # written after that run noted the tip
    driver.run_to_end(late)

    def catch_up(age: bool = True) -> Any:
        if age:  # as if the scheduler's period (more than the settle time) had passed
            with rplane.engine.begin() as conn:
                conn.execute(text("UPDATE projector_checkpoint SET pending_at = pending_at - interval '1 hour'"))
        answer = projector_client.post("/api/internal/projector/catch-up", headers=API_HEADERS)
        assert answer.status_code == 200, answer.get_json()
        return answer.get_json()

    assert catch_up(age=False) == {"behind": 0, "applied": 0}  # the range due is not settled yet
    assert catch_up() == {"behind": 0, "applied": 0}  # the range due ends before ``late``: nothing lags in it
    with rplane.engine.begin() as conn:  # what the next run visits: the events since the checkpoint, by index
        checkpoint = conn.execute(text("SELECT checked_position, pending_position FROM projector_checkpoint")).one()
        conn.execute(text("SET LOCAL enable_seqscan = off"))  # a table this small would be read whole anyway
        plan = conn.execute(
            text("EXPLAIN (ANALYZE, FORMAT JSON) " + str(catchup.LAGGING)),
            {"t": "acme", "o": "ops", "lo": checkpoint[0], "hi": checkpoint[1], "limit": 200},
        ).scalar_one()
        in_range = conn.execute(
            text("SELECT count(*) FROM event WHERE position > :lo AND position <= :hi"),
            {"lo": checkpoint[0], "hi": checkpoint[1]},
        ).scalar_one()
        total = conn.execute(text("SELECT count(*) FROM event")).scalar_one()
    assert _rows_visited(plan, "event") == in_range < total  # nothing before the checkpoint is read
    assert catch_up() == {"behind": 1, "applied": 1}
    assert _verify(rclient, late)["ok"]
    assert catch_up() == {"behind": 0, "applied": 0}
    assert projector_client.post("/api/internal/projector/catch-up").status_code == 401


def _rows_visited(plan: Any, table: str) -> int:
    """The rows the plan's scans of ``table`` (or of its partitions: ``event_p20261125``, ``event_history``,
    ``event_default``, docs/retention.md) read: returned plus removed by a filter (EXPLAIN ANALYZE)."""
    document = plan if isinstance(plan, list) else json.loads(plan)
    total = 0
    partition = re.compile(rf"^{re.escape(table)}(_p\d{{8}}|_history|_default)?$")

    def walk(node: dict[str, Any]) -> None:
        nonlocal total
        if partition.match(node.get("Relation Name", "")):
            rows = int(node["Actual Rows"]) + int(node.get("Rows Removed by Filter", 0))
            total += rows * int(node.get("Actual Loops", 1))
        for child in node.get("Plans", []):
            walk(child)

    walk(document[0]["Plan"])
    return total


def test_concurrent_deliveries_of_one_execution_fold_each_event_exactly_once(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    register(rclient, chain_playbook("projector/concurrent", 6))
    driver = Driver(rclient, rplane.engine, seed=3)
    eid = driver.start("projector/concurrent")
    projector = projector_role.projector
    with ThreadPoolExecutor(4) as pool:  # four instances taking deliveries while the execution is written
        pending = [pool.submit(projector.handle, last_event(rplane, eid)) for _ in range(4)]
        while driver.status(eid)["status"] not in ENDED:
            (command,) = driver.issued(eid)
            driver.run_one(command)
            pending += [pool.submit(projector.handle, last_event(rplane, eid)) for _ in range(3)]
        results = [f.result() for f in pending]
    with rplane.engine.connect() as conn:
        total = conn.execute(text("SELECT count(*) FROM event WHERE execution_id = :e"), {"e": int(eid)}).scalar_one()
    assert {r.outcome for r in results} == {"applied", "duplicate"}
    assert sum(r.applied for r in results) == total  # no event folded twice, none missed
    assert not any(r.refolded for r in results)
    report = _verify(rclient, eid)
    assert report["ok"] and report["events_behind"] == 0, report


def test_a_fold_at_the_tip_takes_the_surfaces_this_instance_committed_and_loads_them_otherwise(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    from noetl_cloud.projector.service import Projector

    register(rclient, chain_playbook("projector/cache", 3))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/cache")
    cached = projector_role.projector
    uncached = Projector(projector_role.engine, projector_role.registry, cache_rows=0)
    assert cached.handle(last_event(rplane, eid)).outcome == "applied"
    loads: dict[str, int] = {}
    statements: dict[str, list[str]] = {}
    who = ""

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.setdefault(who, []).append(" ".join(statement.split()))
        if "SELECT projection_type, page, version, state" in statement:
            loads[who] = loads.get(who, 0) + 1

    engines = (projector_role.engine, projector_role.reader)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        for name, projector in (("cached", cached), ("uncached", uncached), ("cached again", cached)):
            who = name
            (command,) = driver.issued(eid)
            driver.run_one(command)  # a claim and a report: two writes, one batch
            assert projector.handle(last_event(rplane, eid)).outcome == "applied"
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)
    # A fold at the tip is three round trips when the surfaces are kept: the first read, the events after
    # the tracking position, and one write, on autocommit: no BEGIN, no lock, no COMMIT.
    first_read, events, write = statements["cached"]
    assert "FROM event d LEFT JOIN projection_tracking t" in first_read
    assert events.startswith("SELECT position, event_id") and "position > " in events
    assert write.startswith("WITH") and 'INSERT INTO "projection_tracking"' in write
    # The cached instance folded the last write itself: no load. The other one loads; after it folded,
    # the first one's surfaces are at an older version than the tracking row: it loads too.
    assert loads == {"uncached": 1, "cached again": 1}
    assert (cached.cache.hits, cached.cache.misses) == (1, 1)
    assert driver.status(eid)["status"] == "completed"
    report = _verify(rclient, eid)  # the rows the cached folds wrote are the fold of the log
    assert report["ok"] and report["events_behind"] == 0, report


def test_a_fold_at_the_tip_writes_nothing_when_another_fold_committed_since_its_read(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole, monkeypatch: Any
) -> None:
    from noetl_cloud.projector.service import Projector
    from noetl_cloud.replay import postgres

    register(rclient, chain_playbook("projector/race", 2))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/race")
    first, other = projector_role.projector, Projector(projector_role.engine, projector_role.registry)
    assert first.handle(last_event(rplane, eid)).outcome == "applied"
    (command,) = driver.issued(eid)
    driver.run_one(command)
    last = last_event(rplane, eid)
    with projector_role.reader.connect() as conn:
        stale = postgres.delivery(conn, last)  # the first read of one instance ...
    assert stale is not None and stale.tracking is not None and stale.position > stale.tracking.position
    won = other.handle(last)  # ... while another folds the same events and commits
    assert won.outcome == "applied"
    monkeypatch.setattr(postgres, "delivery", lambda conn, event_id: stale)
    lost = first.handle(last)  # its conditional write finds the tracking row changed: the locked path
    assert lost.outcome == "duplicate" and lost.position == won.position
    with rplane.engine.connect() as conn:
        tracked = conn.execute(
            text("SELECT version FROM projection_tracking WHERE execution_id = :e"), {"e": int(eid)}
        ).scalar_one()
        total = conn.execute(text("SELECT count(*) FROM event WHERE execution_id = :e"), {"e": int(eid)}).scalar_one()
    assert tracked == total  # each event folded once
    assert _verify(rclient, eid)["ok"]


def test_empty_surfaces_get_no_row_and_a_projection_written_before_row_kinds_is_refolded(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    register(rclient, chain_playbook("projector/rows", 3))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("projector/rows")
    driver.run_to_end(eid)
    projector = projector_role.projector
    assert projector.handle(last_event(rplane, eid)).outcome == "applied"

    def stored() -> tuple[set[str], list[str] | None]:
        with rplane.engine.connect() as conn:
            kinds = conn.execute(
                text("SELECT projection_type FROM projection WHERE execution_id = :e"), {"e": int(eid)}
            ).all()
            listed = conn.execute(
                text("SELECT row_kinds FROM projection_tracking WHERE execution_id = :e"), {"e": int(eid)}
            ).scalar_one()
        return {k for (k,) in kinds}, listed

    assert stored() == ({"execution", "stages", "commands"}, ["execution", "stages", "commands"])
    assert _verify(rclient, eid)["ok"]  # the missing rows are the empty surfaces: no drift
    with rplane.engine.begin() as conn:  # as a tracking row written before migration 0013 reads: every kind
        conn.execute(text("UPDATE projection_tracking SET row_kinds = NULL WHERE execution_id = :e"), {"e": int(eid)})
    rebuilt = projector.project("acme", "ops", eid)  # rows missing for kinds it lists: refolded
    assert rebuilt.refolded and rebuilt.surfaces == ["execution", "stages", "commands"]
    assert stored() == ({"execution", "stages", "commands"}, ["execution", "stages", "commands"])
    assert _verify(rclient, eid)["ok"]
