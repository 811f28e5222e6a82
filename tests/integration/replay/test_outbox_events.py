"""The event outbox publisher: after its commit each writer publishes to the events topic one message
per execution it wrote to, naming the last event it wrote there (ordering key = execution id;
attributes event_type, tenant_id, organization_id); what a failed publish or a crashed writer leaves
is published by the sweep; nothing is published before a commit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.cloud import pubsub_v1
from sqlalchemy import select, text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.db.schema import event, outbox
from noetl_cloud.eventlog.relay import OutboxRelay
from tests.integration.control_fixtures import PROJECT, register
from tests.integration.distributed_driver import Driver
from tests.integration.replay_fixtures import EventsTopic, chain_playbook


def _event_rows(plane: ControlPlane, topic: str) -> list[Any]:
    with plane.engine.connect() as conn:
        return list(conn.execute(select(outbox.c.event_id, outbox.c.status).where(outbox.c.topic == topic)).all())


def _execution_events(plane: ControlPlane, eid: str) -> list[str]:
    with plane.engine.connect() as conn:
        rows = conn.execute(select(event.c.event_id).where(event.c.execution_id == int(eid)).order_by(event.c.position))
        return [str(r) for r in rows.scalars()]


def _mirrored(plane: ControlPlane, eid: str) -> list[str]:
    """The events the outbox rows of an execution name, in log order."""
    with plane.engine.connect() as conn:
        rows = conn.execute(
            select(outbox.c.event_id)
            .join(event, event.c.event_id == outbox.c.event_id)
            .where(event.c.execution_id == int(eid), outbox.c.topic.not_like("%-commands-%"))
            .order_by(event.c.position)
        )
        return [str(r) for r in rows.scalars()]


def test_every_writer_publishes_its_last_event_per_execution_after_its_commit_in_log_order(
    rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic
) -> None:
    register(rclient, chain_playbook("outbox/chain", 3))
    assert [m.attributes["event_type"] for m in events_topic.pull(1)] == ["catalog.registered"]  # the next test
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("outbox/chain")  # execute: playbook.started ... command.issued
    driver.run_to_end(eid)  # claim (command.claimed), report (command.*, step.*, playbook.completed)
    cancelled = driver.start("outbox/chain")
    assert rclient.post(f"/api/executions/{cancelled}/cancel", json={"reason": "test"}).status_code == 200
    events = {eid: _execution_events(rplane, eid), cancelled: _execution_events(rplane, cancelled)}
    # one per write: start, then a claim and a report per step of the three; start, then cancel
    writes = {eid: 1 + 2 * 3, cancelled: 2}
    messages = events_topic.pull(sum(writes.values()))
    by_execution: dict[str, list[str]] = {}
    counted: dict[str, int] = {}
    for message in messages:
        data = json.loads(message.data)
        assert message.ordering_key == data["execution_id"]
        assert message.attributes["tenant_id"] == "acme" and message.attributes["organization_id"] == "ops"
        assert message.attributes["event_type"]
        by_execution.setdefault(data["execution_id"], []).append(data["event_id"])
        counted[data["execution_id"]] = counted.get(data["execution_id"], 0) + data["events"]
    assert {e: len(ids) for e, ids in by_execution.items()} == writes  # each write once
    for e, ids in by_execution.items():
        positions = [events[e].index(i) for i in ids]  # each names an event of its execution
        assert positions == sorted(positions) and ids[-1] == events[e][-1]  # in log order, to the last
    assert counted == {e: len(ids) for e, ids in events.items()}  # every event is covered by one message
    left = {str(e) for e, _status in _event_rows(rplane, events_topic.name)}
    assert not left & {i for ids in by_execution.values() for i in ids}  # published, so deleted


def test_events_of_no_execution_are_published_after_their_commit_not_left_for_the_sweep(
    rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic
) -> None:
    """A catalog registration (written in the catalog's own transaction) and a listener's audit event
    (the store's own append) reach the events topic once committed, one message per stream, and leave
    no outbox row behind: before, they waited for the sweep."""
    register(rclient, chain_playbook("outbox/catalog", 1))
    audited = rplane.listeners.audit("github", "subscription.message.rejected", {"reason": "signature"})
    messages = events_topic.pull(2)
    assert [(m.attributes["event_type"], m.ordering_key) for m in messages] == [
        ("catalog.registered", "catalog/outbox/catalog"),
        ("subscription.message.rejected", "listener/github"),
    ]
    assert [json.loads(m.data)["execution_id"] for m in messages] == [None, None]
    assert json.loads(messages[1].data)["event_id"] == audited
    assert _event_rows(rplane, events_topic.name) == []  # published at once, so deleted; none pending


def test_a_failed_publish_stays_pending_with_backoff_until_the_sweep_publishes_it(
    rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic
) -> None:
    register(rclient, chain_playbook("outbox/down", 1))
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(PROJECT, events_topic.name)
    events_topic.subscriber.delete_subscription(subscription=events_topic.subscription)
    publisher.delete_topic(topic=topic)  # the events topic is gone: every publish to it fails
    eid = Driver(rclient, rplane.engine).start("outbox/down")
    rows = _event_rows(rplane, events_topic.name)
    ids = _mirrored(rplane, eid)
    assert ids and {s for _e, s in rows} == {"pending"}  # none lost
    with rplane.engine.connect() as conn:
        backoff = conn.execute(
            text(
                "SELECT bool_and(available_at > now()), min(attempts), max(attempts) FROM outbox WHERE topic = :t "
                "AND event_id IN (SELECT event_id FROM event WHERE execution_id = :e)"
            ),
            {"t": events_topic.name, "e": int(eid)},
        ).one()
    assert tuple(backoff) == (True, 1, 1)  # one attempt each, the next one backed off
    assert rclient.post("/api/internal/outbox/sweep").get_json()["events_claimed"] == 0  # backing off
    publisher.create_topic(name=topic)
    events_topic.subscriber.create_subscription(
        request={"name": events_topic.subscription, "topic": topic, "enable_message_ordering": True}
    )
    with rplane.engine.begin() as conn:  # the back-off has passed
        conn.execute(text("UPDATE outbox SET available_at = now() - interval '1 hour'"))
    swept = rclient.post("/api/internal/outbox/sweep").get_json()
    assert swept["events_published"] == len(rows)
    received = {json.loads(m.data)["event_id"] for m in events_topic.pull(len(rows))}
    assert set(ids) <= received
    assert _event_rows(rplane, events_topic.name) == []  # published by the sweep, then deleted


def test_the_sweep_publishes_what_a_crashed_writer_left_and_rows_stuck_in_flight(
    rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OutboxRelay, "hand_off", lambda _relay, _rows: None)  # writers that die after commit
    register(rclient, chain_playbook("outbox/crash", 1))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("outbox/crash")
    (command,) = driver.issued(eid)
    assert driver.claim(command).status_code == 200  # a third write: catalog, start, claim
    with rplane.engine.begin() as conn:
        # A writer that died after its commit (pending, never published) and a sweep that died after its
        # claim (in flight, its lease run out).
        ids = [
            r[0]
            for r in conn.execute(
                text("SELECT outbox_id FROM outbox WHERE topic = :t ORDER BY 1"), {"t": events_topic.name}
            )
        ]
        conn.execute(
            text(
                "UPDATE outbox SET status = 'pending', available_at = now() - interval '1 minute' WHERE outbox_id = :i"
            ),
            {"i": ids[0]},
        )
        conn.execute(
            text("UPDATE outbox SET status = 'in_flight', available_at = now() - interval '1 s' WHERE outbox_id = :i"),
            {"i": ids[1]},
        )
        conn.execute(
            text(
                "UPDATE outbox SET status = 'in_flight', available_at = now() + interval '1 hour' WHERE outbox_id = :i"
            ),
            {"i": ids[2]},
        )
    swept = rclient.post("/api/internal/outbox/sweep").get_json()
    assert (swept["events_claimed"], swept["events_published"]) == (2, 2)  # the live lease is left alone
    assert len(events_topic.pull(2)) == 2


def test_nothing_is_published_for_a_transaction_that_rolled_back(
    rclient: FlaskClient, rplane: ControlPlane, events_topic: EventsTopic
) -> None:
    register(rclient, chain_playbook("outbox/rollback", 2))
    driver = Driver(rclient, rplane.engine)
    eid = driver.start("outbox/rollback")
    events_topic.pull(1)  # the start's one write
    before = len(_execution_events(rplane, eid))
    (command,) = driver.issued(eid)
    assert driver.claim(command).status_code == 200
    events_topic.pull(1)
    # A report from a worker that does not hold the lease: the transaction appends nothing and rolls back.
    body = {"command_id": command, "worker_id": "intruder", "attempt": 1, "status": "ok"}
    assert rclient.post("/api/events", json=body).status_code == 409
    assert len(_execution_events(rplane, eid)) == before + 1  # command.claimed only: the report wrote nothing
    assert events_topic.pull(1, timeout_s=2) == []
