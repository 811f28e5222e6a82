"""The execute hot path on PostgreSQL: eager dispatch of the next command in a report's answer, the
reaper re-issuing an eagerly handed command whose worker died, the catalog cache never serving a
version older than one registered before the request, and the round trips of a single execute."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pg8000.core
import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.models import ExecuteRequest
from noetl_cloud.control.orchestrator import Orchestrator
from noetl_cloud.messaging.port import OutboundMessage
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import Topics, register
from tests.integration.replay_fixtures import chain_playbook

FAN_OUT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fan, path: hot/fan}
workflow:
  - step: start
    tool: {kind: noop, result: 0}
    next:
      spec: {mode: inclusive}
      arcs: [{step: left}, {step: right}]
  - step: left
    tool: {kind: noop, result: 1}
  - step: right
    tool: {kind: noop, result: 2}
"""


def _claim_first(client: FlaskClient, plane: ControlPlane, execution_id: str) -> dict[str, Any]:
    with plane.engine.connect() as conn:
        command_id = conn.execute(
            text("SELECT command_id FROM command WHERE execution_id = :e AND status = 'issued'"),
            {"e": int(execution_id)},
        ).scalar_one()
    claimed = client.post(f"/api/commands/{command_id}/claim", json={"worker_id": "w1"})
    assert claimed.status_code == 200, claimed.get_json()
    return claimed.get_json()  # type: ignore[no-any-return]


def _report(client: FlaskClient, command: dict[str, Any], *, accept_next: bool = True, **extra: Any) -> dict[str, Any]:
    body = {
        **extra,
        "command_id": command["command_id"],
        "worker_id": "w1",
        "attempt": command["attempt"],
        "status": "ok",
        "result": {"step": command["step"]},
        "accept_next": accept_next,
    }
    answer = client.post("/api/events", json=body)
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()  # type: ignore[no-any-return]


def _fanned_out(client: FlaskClient, plane: ControlPlane) -> tuple[str, dict[str, Any]]:
    """A fan-out execution whose first step is reported: its id and its two issued branches (step -> command id)."""
    register(client, FAN_OUT)
    execution_id = client.post("/api/execute", json={"path": "hot/fan"}).get_json()["execution_id"]
    assert _report(client, _claim_first(client, plane, execution_id), accept_next=False)["next"] == []
    with plane.engine.connect() as conn:
        branches = dict(
            conn.execute(
                text("SELECT step, command_id FROM command WHERE execution_id = :e AND status = 'issued'"),
                {"e": int(execution_id)},
            ).all()
        )
    return execution_id, branches


@pytest.fixture
def sent(plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> list[OutboundMessage]:
    """Every message the control plane hands to Pub/Sub (still published: the real publisher is called)."""
    messages: list[OutboundMessage] = []
    publish = plane.publisher.publish

    def recording(batch: Sequence[OutboundMessage]) -> list[str | None]:
        messages.extend(batch)
        return publish(batch)

    monkeypatch.setattr(plane.publisher, "publish", recording)
    return messages


def _notifications(plane: ControlPlane, sent: list[OutboundMessage], command_id: str) -> int:
    """How many notifications of ``command_id`` were published on the command topics."""
    prefix = plane.settings.command_topic_prefix
    return sum(m.topic.startswith(prefix) and m.attributes.get("command_id") == command_id for m in sent)


def test_a_sequential_chain_hands_each_next_command_to_the_reporting_worker(
    client: FlaskClient, plane: ControlPlane, topics: Topics, sent: list[OutboundMessage]
) -> None:
    register(client, chain_playbook("hot/chain", 3))
    execution_id = client.post("/api/execute", json={"path": "hot/chain"}).get_json()["execution_id"]
    command = _claim_first(client, plane, execution_id)
    steps = [command["step"]]
    for _ in range(2):
        answer = _report(client, command)
        (command,) = answer["next"]
        assert (command["status"], command["worker_id"], command["attempt"]) == ("claimed", "w1", 1)
        assert command["scope"]["ctx"] == {} and command["playbook"]["path"] == "hot/chain"
        assert _notifications(plane, sent, command["command_id"]) == 0  # no Pub/Sub hop for it
        steps.append(command["step"])
    last = _report(client, command)
    assert last["next"] == [] and last["execution_status"] == "completed"
    assert steps == ["s1", "s2", "s3"]
    events = client.get(f"/api/executions/{execution_id}/events").get_json()["events"]
    claimed = [e["payload"] for e in events if e["event_type"] == "command.claimed"]
    assert [c.get("eager", False) for c in claimed] == [False, True, True]


def test_without_accept_next_or_on_a_fan_out_every_command_goes_through_its_topic(
    client: FlaskClient, plane: ControlPlane, topics: Topics, sent: list[OutboundMessage]
) -> None:
    register(client, chain_playbook("hot/plain", 2))
    register(client, FAN_OUT)
    plain = client.post("/api/execute", json={"path": "hot/plain"}).get_json()["execution_id"]
    assert _report(client, _claim_first(client, plane, plain), accept_next=False)["next"] == []
    fan = client.post("/api/execute", json={"path": "hot/fan"}).get_json()["execution_id"]
    (handed,) = _report(client, _claim_first(client, plane, fan))["next"]
    with plane.engine.connect() as conn:
        new = (
            conn.execute(
                text(
                    "SELECT command_id FROM command WHERE execution_id IN (:a, :b) AND step <> 's1' AND step <> 'start'"
                ),
                {"a": int(plain), "b": int(fan)},
            )
            .scalars()
            .all()
        )
    assert len(new) == 3 and all(_notifications(plane, sent, str(c)) == 1 for c in new)  # each through its topic
    # Two branches are not a chain: the answer hands the oldest command waiting in the pool, the plain
    # chain's second step, issued (and notified) before the fan-out's branches.
    assert (handed["execution_id"], handed["step"], handed["worker_id"]) == (plain, "s2", "w1")


def test_a_worker_with_no_next_step_of_its_own_gets_the_oldest_command_waiting_in_its_pool(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    register(client, chain_playbook("hot/one", 1))
    elsewhere = client.post("/api/execute", json={"path": "hot/one", "execution_pool": "iot"}).get_json()
    waiting = [client.post("/api/execute", json={"path": "hot/one"}).get_json()["execution_id"] for _ in range(2)]
    first = _claim_first(client, plane, waiting[0])
    answer = _report(client, first)
    assert answer["execution_status"] == "completed"
    (handed,) = answer["next"]  # the other execution's command, not the iot pool's
    assert (handed["execution_id"], handed["status"], handed["execution_pool"]) == (waiting[1], "claimed", "shared")
    refused = client.post(f"/api/commands/{handed['command_id']}/claim", json={"worker_id": "w2"})
    assert refused.status_code == 409  # its notification, when it comes, finds it taken
    assert _report(client, handed)["next"] == []  # nothing left in the shared pool
    assert client.get(f"/api/executions/{elsewhere['execution_id']}").get_json()["status"] == "started"


def test_a_report_fills_the_workers_free_slots_with_its_next_step_then_the_oldest_waiting_commands(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    register(client, chain_playbook("hot/slots", 2))
    register(client, chain_playbook("hot/one", 1))
    mine = client.post("/api/execute", json={"path": "hot/slots"}).get_json()["execution_id"]
    waiting = [client.post("/api/execute", json={"path": "hot/one"}).get_json()["execution_id"] for _ in range(3)]
    answer = _report(client, _claim_first(client, plane, mine), next_slots=3)
    # Its own next step first, then the two oldest commands of the pool; the third stays issued.
    assert [(c["execution_id"], c["status"], c["worker_id"]) for c in answer["next"]] == [
        (mine, "claimed", "w1"),
        (waiting[0], "claimed", "w1"),
        (waiting[1], "claimed", "w1"),
    ]
    with plane.engine.connect() as conn:
        left = conn.execute(
            text("SELECT status FROM command WHERE execution_id = :e"), {"e": int(waiting[2])}
        ).scalar_one()
    assert left == "issued"
    handed = answer["next"][1]
    report = {"command_id": handed["command_id"], "worker_id": "w1", "attempt": 1, "status": "ok"}
    too_many = client.post("/api/events", json={**report, "accept_next": True, "next_slots": 33})
    assert too_many.status_code == 422 and "next_slots" in str(too_many.get_json())  # at most 32 back
    assert client.post("/api/events", json={**report, "accept_next": True, "next_slots": 32}).status_code == 200


def test_a_report_claims_for_free_slots_only_when_a_command_waits_in_its_pool(
    client: FlaskClient, plane: ControlPlane, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(client, chain_playbook("hot/probe", 3))
    register(client, chain_playbook("hot/one", 1))
    claims: list[int] = []
    claim_queued = plane.orchestrator.claim_queued

    def counting(pool: str, worker_id: str, limit: int = 1) -> list[dict[str, Any]]:
        claims.append(limit)
        return claim_queued(pool, worker_id, limit)

    monkeypatch.setattr(plane.orchestrator, "claim_queued", counting)
    mine = client.post("/api/execute", json={"path": "hot/probe"}).get_json()["execution_id"]
    (second,) = _report(client, _claim_first(client, plane, mine), next_slots=3)["next"]
    assert claims == []  # its next step and nothing waiting: no claim transaction
    waiting = client.post("/api/execute", json={"path": "hot/one"}).get_json()["execution_id"]
    third, queued = _report(client, second, next_slots=3)["next"]
    assert claims == [2] and queued["execution_id"] == waiting and third["execution_id"] == mine


def test_an_eagerly_handed_command_whose_worker_died_is_issued_again_by_the_reaper(
    client: FlaskClient, plane: ControlPlane, topics: Topics, sent: list[OutboundMessage]
) -> None:
    register(client, chain_playbook("hot/dies", 2))
    execution_id = client.post("/api/execute", json={"path": "hot/dies"}).get_json()["execution_id"]
    (handed,) = _report(client, _claim_first(client, plane, execution_id))["next"]
    # The worker that took it dies: nothing heartbeats, and its lease runs out.
    with plane.engine.begin() as conn:
        conn.execute(
            text("UPDATE command SET lease_expires_at = now() - interval '1 second' WHERE command_id = :c"),
            {"c": int(handed["command_id"])},
        )
    reaped = client.post("/api/internal/reaper").get_json()
    assert reaped["reissued"] == 1
    with plane.engine.connect() as conn:
        row = conn.execute(
            text("SELECT status, attempt, worker_id FROM command WHERE command_id = :c"),
            {"c": int(handed["command_id"])},
        ).one()
    assert (row.status, row.attempt, row.worker_id) == ("issued", 2, None)
    assert _notifications(plane, sent, handed["command_id"]) == 1  # the re-issue goes through the topic
    again = client.post(f"/api/commands/{handed['command_id']}/claim", json={"worker_id": "w2"}).get_json()
    assert again["attempt"] == 2


def test_the_catalog_cache_never_serves_a_version_older_than_one_registered_before_the_request(
    client: FlaskClient, plane: ControlPlane, control_settings: Settings, topics: Topics
) -> None:
    register(client, chain_playbook("hot/versioned", 1))
    first = plane.executions.start_one(ExecuteRequest(path="hot/versioned"))  # caches version 1 as latest
    other = ControlPlane(control_settings)  # another instance of the execute role: its own cache
    try:
        other.catalog.register(chain_playbook("hot/versioned", 2))
    finally:
        other.relay.close()
        other.engine.dispose()
    second = plane.executions.start_one(ExecuteRequest(path="hot/versioned"))
    versions = [client.get(f"/api/executions/{r.execution_id}").get_json()["version"] for r in (first, second)]
    assert versions == [1, 2]
    third = plane.executions.start_one(ExecuteRequest(path="hot/versioned"))  # the refreshed cache
    assert client.get(f"/api/executions/{third.execution_id}").get_json()["version"] == 2


@pytest.fixture
def round_trips() -> Iterator[list[int]]:
    """Counts the messages this thread flushes to PostgreSQL (one per round trip)."""
    counted = [0]
    original = pg8000.core._flush
    me = threading.get_ident()

    def counting(sock: Any) -> None:
        if threading.get_ident() == me:
            counted[0] += 1
        original(sock)

    pg8000.core._flush = counting
    yield counted
    pg8000.core._flush = original


def test_a_single_execute_is_one_round_trip_with_a_delivery_key_too_and_with_a_dedup_key_one_transaction(
    client: FlaskClient, plane: ControlPlane, topics: Topics, round_trips: list[int]
) -> None:
    register(client, chain_playbook("hot/count", 2))
    plane.executions.start_one(ExecuteRequest(path="hot/count"))  # warm: statements prepared, entry cached
    plane.relay.background = True  # publishing is the relay thread's, as in the roles
    round_trips[0] = 0
    result = plane.executions.start_one(ExecuteRequest(path="hot/count"))
    counted = round_trips[0]
    assert plane.relay.flush()
    print(f"round trips of one execute: {counted}")
    assert result.status == "started" and counted == 1, counted  # the batch, committing by itself
    # With a dedup key the claim of the key and the batch are one transaction: BEGIN, the two, COMMIT
    # (and, the first time, the preparing of the claim's statement).
    round_trips[0] = 0
    deduped = plane.executions.start_one(ExecuteRequest(path="hot/count", dedup={"key": "k-1", "window_secs": 60}))
    assert deduped.status == "started" and 4 <= round_trips[0] <= 5, round_trips[0]
    assert plane.relay.flush()
    # A delivery key (the ingress's replay protection) is claimed by the batch statement itself.
    plane.executions.start_one(ExecuteRequest(path="hot/count", delivery={"key": "hooks/0", "window_secs": 60}))
    round_trips[0] = 0
    delivered = plane.executions.start_one(
        ExecuteRequest(path="hot/count", delivery={"key": "hooks/1", "window_secs": 60})
    )
    assert delivered.status == "started" and round_trips[0] == 1, round_trips[0]
    assert plane.relay.flush()


def test_a_report_that_waited_for_its_execution_counts_what_the_lock_holder_committed(
    client: FlaskClient, plane: ControlPlane, topics: Topics
) -> None:
    """Two branches end at once: the second report waits for the execution's lock while the first
    ends its command; once the lock is its, it must count the commands still open afresh, or the
    execution, counted one command too many, never ends."""
    execution_id, branches = _fanned_out(client, plane)
    left, right = (
        client.post(f"/api/commands/{branches[s]}/claim", json={"worker_id": "w1"}).get_json()
        for s in ("left", "right")
    )
    answers: list[dict[str, Any]] = []
    with plane.engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM execution WHERE execution_id = :e FOR UPDATE"), {"e": int(execution_id)})
        reporter = threading.Thread(target=lambda: answers.append(_report(client, right, accept_next=False)))
        reporter.start()
        with plane.engine.connect() as watcher:  # until the report waits for the lock the holder has
            waiting = text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            deadline = time.monotonic() + 30
            while watcher.execute(waiting).scalar_one() == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
        # What the left branch's report does to the command table while it holds the lock: its command ends.
        holder.execute(
            text("UPDATE command SET status = 'completed' WHERE command_id = :c"), {"c": int(left["command_id"])}
        )
        holder.commit()
        reporter.join(30)
    assert answers and answers[0]["execution_status"] == "completed"


def _stream_versions(plane: ControlPlane, execution_id: str) -> list[int]:
    with plane.engine.connect() as conn:
        return list(
            conn.execute(
                # its own stream, as stored (noetl_cloud.eventlog.stored)
                text(
                    "SELECT stream_version FROM event WHERE execution_id = :x AND stream_id = chr(1) "
                    "ORDER BY stream_version"
                ),
                {"x": int(execution_id)},
            ).scalars()
        )


def test_a_claim_is_one_statement_and_its_event_and_a_report_one_more_and_the_commit(
    client: FlaskClient, plane: ControlPlane, topics: Topics, round_trips: list[int]
) -> None:
    register(client, chain_playbook("hot/trips", 3))
    plane.relay.background = True  # publishing is the relay thread's, as in the roles
    for _ in range(2):  # warm: statements prepared, plans cached; then counted
        execution_id = client.post("/api/execute", json={"path": "hot/trips"}).get_json()["execution_id"]
        with plane.engine.connect() as conn:
            first = conn.execute(
                text("SELECT command_id FROM command WHERE execution_id = :e"), {"e": int(execution_id)}
            ).scalar_one()
        round_trips[0] = 0
        command = plane.orchestrator.claim(first, "w1")
        claim_trips = round_trips[0]
        round_trips[0] = 0
        answer = _report(client, {**command, "attempt": 1})
        report_trips = round_trips[0]
    # BEGIN, the claim with its document and the stream's head, the event with the head's move, COMMIT.
    assert claim_trips == 4, claim_trips
    # BEGIN, the execution's lock, the command's lock with the stream's head, the turn, COMMIT.
    assert report_trips == 5, report_trips
    (handed,) = answer["next"]
    last = _report(client, _report(client, handed)["next"][0])
    assert last["execution_status"] == "completed", last
    assert plane.relay.flush()
    versions = _stream_versions(plane, execution_id)
    assert versions == list(range(1, len(versions) + 1)), versions  # none twice, none skipped


def test_a_report_whose_stream_a_claim_appended_to_after_its_lock_writes_after_that_event(
    client: FlaskClient, plane: ControlPlane, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report reads the stream's head with its command lock, without locking the stream: a claim of a
    parallel branch that appends in between moves the head, and the report's write, finding it moved,
    writes nothing and is written again after a bump of the head, its events after the claim's."""
    execution_id, branches = _fanned_out(client, plane)
    left = client.post(f"/api/commands/{branches['left']}/claim", json={"worker_id": "w1"}).get_json()
    original = Orchestrator._lock_command
    moved: list[int] = []

    def lock_then_claim_the_other_branch(*args: Any, **kwargs: Any) -> Any:
        cmd = original(*args, **kwargs)
        if not moved:  # another transaction, committed before the report writes
            moved.append(cmd.head)
            # From another thread: a request made inside this one would share its Flask globals.
            claims: list[Any] = []
            claiming = threading.Thread(
                target=lambda: claims.append(
                    client.post(f"/api/commands/{branches['right']}/claim", json={"worker_id": "w2"})
                )
            )
            claiming.start()
            claiming.join(30)
            assert claims and claims[0].status_code == 200, claims
        return cmd

    monkeypatch.setattr(Orchestrator, "_lock_command", staticmethod(lock_then_claim_the_other_branch))
    assert _report(client, left, accept_next=False)["accepted"] is True
    versions = _stream_versions(plane, execution_id)
    assert moved and versions == list(range(1, len(versions) + 1))
    with plane.engine.connect() as conn:
        order = conn.execute(
            text(
                "SELECT event_type, payload ->> 'command_id' FROM event WHERE execution_id = :x AND stream_id = chr(1) "
                "AND stream_version > :head ORDER BY stream_version LIMIT 2"
            ),
            {"x": int(execution_id), "head": moved[0]},
        ).all()
    assert [tuple(row) for row in order] == [
        ("command.claimed", str(branches["right"])),
        ("command.started", str(left["command_id"])),
    ]
