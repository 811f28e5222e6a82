"""The background outbox relay: rows committed by a request are published after it answered, and a
process killed between its commit and its publish loses nothing (any live relay's sweep publishes
what it left)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence

from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.models import ExecuteRequest
from noetl_cloud.eventlog.relay import OutboxRelay
from noetl_cloud.messaging.port import OutboundMessage
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import Topics, register
from tests.integration.replay_fixtures import chain_playbook

# A child execute role whose publisher never returns: it commits, answers, and dies before publishing.
CHILD = textwrap.dedent(
    """
    import json, sys, threading
    from noetl_cloud.control.bootstrap import ControlPlane
    from noetl_cloud.control.models import ExecuteRequest
    from noetl_cloud.settings import Settings

    class Stuck:
        def publish(self, messages):
            threading.Event().wait()
        def ensure_topics(self, topics):
            pass

    settings = Settings.model_validate_json(sys.argv[1])
    plane = ControlPlane(settings, publisher_override=Stuck())
    started = plane.executions.start_one(ExecuteRequest(path=sys.argv[2]))
    print(json.dumps({"execution_id": started.execution_id}), flush=True)
    threading.Event().wait()
    """
)


def _statuses(plane: ControlPlane, execution_id: str) -> list[str]:
    with plane.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT o.status FROM outbox o JOIN event e ON e.event_id = o.event_id "
                    "WHERE e.execution_id = :e ORDER BY o.outbox_id"
                ),
                {"e": int(execution_id)},
            ).scalars()
        )


def test_the_relay_publishes_after_the_request_and_measures_the_delay(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    register(client, chain_playbook("relay/bg", 1))
    relay = OutboxRelay(plane.engine, plane.publisher, background=True, topic_prefix=topics.prefix)
    plane.executions.relay = relay
    try:
        started = plane.executions.start_one(ExecuteRequest(path="relay/bg"))
        assert relay.flush(30)
        (message,) = topics.pull("shared", 1)
        assert json.loads(message.data)["execution_id"] == started.execution_id
        assert _statuses(plane, started.execution_id or "") == []  # published, so deleted
        plane.relay = relay  # as the execute role wires it: the answer of its relay endpoint
        stats = client.get("/api/internal/outbox/relay").get_json()
        assert stats["handed_off"] == stats["published"] == 2  # the command notification and the mirror
        assert stats["lag_ms_max"] > 0 and stats["queued_rows"] == 0 and stats["background"] is True
    finally:
        relay.close()


def test_a_process_killed_between_commit_and_publish_loses_nothing(
    client: FlaskClient, plane: ControlPlane, control_settings: Settings, topics: Topics
) -> None:
    register(client, chain_playbook("relay/killed", 1))
    settings = control_settings.model_copy(update={"outbox_publish": "background", "outbox_sweep_every_s": 0})
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, settings.model_dump_json(), "relay/killed"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the answer came before any publish (it never returns)
        execution_id = json.loads(line)["execution_id"]  # answered: the rows are committed
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
    statuses = _statuses(plane, execution_id)
    assert statuses and set(statuses) <= {"pending", "in_flight"}  # nothing was published
    survivor = OutboxRelay(
        plane.engine, plane.publisher, background=True, sweep_every_s=0.2, sweep_grace_s=0, topic_prefix=topics.prefix
    )
    survivor.start()
    try:
        (message,) = topics.pull("shared", 1)
        assert json.loads(message.data)["execution_id"] == execution_id
        deadline = time.monotonic() + 30
        while _statuses(plane, execution_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _statuses(plane, execution_id) == []  # published by the survivor's sweep, then deleted
    finally:
        survivor.close()


def test_the_relay_holds_the_mirror_rows_and_deletes_many_published_rows_in_one_statement(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    register(client, chain_playbook("relay/settle", 1))
    relay = OutboxRelay(
        plane.engine, plane.publisher, background=True, linger_s=0, settle_every_s=3600, topic_prefix=topics.prefix
    )
    deletes: list[int] = []
    record = relay._record
    relay._record = lambda ok, failed: (deletes.append(len(ok)), record(ok, failed))[1]  # type: ignore[method-assign]
    plane.executions.relay = relay
    started = []
    try:
        for _ in range(3):  # one at a time: each hand-off is published before the next is made
            started.append(plane.executions.start_one(ExecuteRequest(path="relay/settle")).execution_id or "")
            topics.pull("shared", 1)
        # The command notifications are published; the mirror rows are held for the settle, which also
        # deletes what was published: it waits for the interval (or the thread's end), so nothing is yet.
        assert relay.report()["published"] == len(started)
        assert deletes == [] and all(set(_statuses(plane, e)) == {"pending"} for e in started)
        rows = sum(len(_statuses(plane, e)) for e in started)
    finally:
        relay.close()
    assert deletes == [rows] and all(_statuses(plane, e) == [] for e in started)  # published: deleted
    assert relay.report()["published"] == rows and relay.report()["queued_rows"] == 0


def test_a_settle_publishes_one_bundle_naming_each_executions_last_event(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    """Every append of an execution writes a mirror row; the projector folds to the tip whatever event a
    delivery names, so a settle publishes only each execution's last row, all of them in one bundle
    (eventlog/bundles.py), and deletes the rest with it."""
    register(client, chain_playbook("relay/coalesce", 3))
    sent: list[OutboundMessage] = []
    publisher = plane.publisher

    class Recording:
        def publish(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
            sent.extend(messages)
            return publisher.publish(messages)

    relay = OutboxRelay(
        plane.engine, Recording(), background=True, linger_s=0, settle_every_s=3600, topic_prefix=topics.prefix
    )  # type: ignore[arg-type]
    plane.executions.relay = plane.orchestrator.relay = relay
    try:
        chain = plane.executions.start_one(ExecuteRequest(path="relay/coalesce")).execution_id or ""
        other = plane.executions.start_one(ExecuteRequest(path="relay/coalesce")).execution_id or ""
        with plane.engine.connect() as conn:
            first = conn.execute(
                text("SELECT command_id FROM command WHERE execution_id = :e"), {"e": int(chain)}
            ).scalar_one()
        command = client.post(f"/api/commands/{first}/claim", json={"worker_id": "w1"}).get_json()
        for _ in range(3):  # each report hands the next step back eagerly: 4 more appends of the chain
            body = {
                "command_id": command["command_id"],
                "worker_id": "w1",
                "attempt": command["attempt"],
                "status": "ok",
                "result": {},
                "accept_next": True,
            }
            answer = client.post("/api/events", json=body).get_json()
            command = (answer["next"] or [None])[0]
        assert answer["execution_status"] == "completed"
        appends = len(_statuses(plane, chain))
        assert appends >= 5  # start, claim, three reports: each held for the settle
    finally:
        relay.close()  # the settle
    (bundle,) = [m for m in sent if not m.topic.startswith(topics.prefix)]  # one message for the settle
    assert (bundle.ordering_key, bundle.attributes) == (None, {"deliveries": "2"})
    deliveries = json.loads(bundle.data)["deliveries"]
    assert sorted(d["execution_id"] for d in deliveries) == sorted([chain, other])
    with plane.engine.connect() as conn:
        last = conn.execute(
            text("SELECT max(event_id) FROM event WHERE execution_id = :e"), {"e": int(chain)}
        ).scalar_one()
    (mine,) = [d for d in deliveries if d["execution_id"] == chain]
    assert mine["event_id"] == str(last)
    assert _statuses(plane, chain) == [] and _statuses(plane, other) == []  # every row deleted
    assert relay.report()["coalesced"] == appends - 1
