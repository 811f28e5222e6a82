"""The frames API on PostgreSQL: claim / heartbeat / commit, their events and stable error codes,
stage closing, the reaper and the backlog metric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.settings import Settings
from tests.integration.frame_fixtures import Frames, claim, commit, heartbeat
from tests.integration.frame_fixtures import frames as frames


def test_a_frame_goes_dispatched_started_heartbeat_committed_with_keyed_checksummed_events(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(max_rows=50)
    answer = claim(client, stage_id, "w1", lease_seconds=30, cursor={"slot": 0})
    assert answer.status_code == 200, answer.get_json()
    (frame,) = answer.get_json()["frames"]
    assert frame["attempt"] == 1 and frame["frame_index"] == 0 and frame["frame_policy"]["max_rows"] == 50
    fid = frame["frame_id"]
    assert heartbeat(client, fid, "w1").get_json()["event"] == "frame.started"
    assert heartbeat(client, fid, "w1").get_json()["event"] == "frame.heartbeat"
    rows_ref = {
        "uri": "noetl://tenant/default/org/default/payloads/sha256/" + "a" * 64,
        "sha256": "a" * 64,
        "media_type": "application/vnd.apache.arrow.stream",
        "size_bytes": 10,
        "row_count": 3,
    }
    done = commit(client, fid, "w1", row_count=3, events_emitted=6, output_ref={"rows_ref": rows_ref})
    assert done.status_code == 200 and done.get_json()["status"] == "COMMITTED"

    events = frames.events(stage_id)
    assert [e["event_type"] for e in events] == [
        "frame.dispatched",
        "frame.started",
        "frame.heartbeat",
        "frame.committed",
    ]
    stream = events[0]["stream_id"]
    assert stream.endswith(f"/stage/{stage_id}/frame/{fid}") and stream.startswith("execution/")
    assert all(e["stream_id"] == stream for e in events)
    assert [e["stream_version"] for e in events] == [1, 2, 3, 4]
    keys = [e["idempotency_key"] for e in events]
    assert len(set(keys)) == 4 and keys[0].endswith(f"/frame/{fid}/dispatched/1")
    stored = PostgresEventStore(frames.engine).read_stream(stream)
    assert all(isinstance(e, EventEnvelope) and e.verify_checksum() for e in stored)
    committed = events[-1]
    assert committed["payload"]["row_count"] == 3 and committed["payload_ref"]["sha256"] == "a" * 64
    row = frames.frame(fid)
    assert (row["status"], row["attempts"], row["row_count"], row["events_emitted"]) == ("COMMITTED", 1, 3, 6)
    assert row["claimed_event_id"] == events[0]["event_id"] and row["terminal_event_id"] == committed["event_id"]
    # Five appends (stage.opened, then the frame's four events): the relay publishes each execution's
    # last mirror row of a settle, so one to five messages, the last naming the commit.
    assert frames.service.flush()
    mirrors = frames.publisher.messages["noetl-events"]
    assert 1 <= len(mirrors) <= 5 and json.loads(mirrors[-1].data)["event_id"] == str(committed["event_id"])


def test_a_second_terminal_commit_is_409_with_the_existing_terminal_event_and_writes_nothing(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage()
    fid = claim(client, stage_id, "w1").get_json()["frames"][0]["frame_id"]
    first = commit(client, fid, "w1").get_json()
    before = len(frames.events(stage_id))
    for status in ("COMPLETED", "FAILED"):
        again = commit(client, fid, "w1", status=status)
        assert again.status_code == 409
        error = again.get_json()["error"]
        assert error["code"] == "frame_already_terminal"
        assert error["details"]["terminal_event_id"] == first["terminal_event_id"]
    late_beat = heartbeat(client, fid, "w1")
    assert late_beat.status_code == 409 and late_beat.get_json()["error"]["code"] == "frame_already_terminal"
    assert len(frames.events(stage_id)) == before


def test_commit_refuses_unknown_statuses_and_ipc_hints_without_a_durable_ref(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage()
    fid = claim(client, stage_id, "w1").get_json()["frames"][0]["frame_id"]
    bad = commit(client, fid, "w1", status="DONE")
    assert bad.status_code == 422 and bad.get_json()["error"]["code"] == "validation_failed"
    ipc_only = {"rows_ref": {"ipc": {"shm_name": "/noetl-1", "node_id": "n"}, "sha256": "b" * 64}}
    refused = commit(client, fid, "w1", output_ref=ipc_only)
    assert refused.status_code == 422 and refused.get_json()["error"]["code"] == "ipc_without_durable_ref"
    durable = {"rows_ref": {"ipc": {"shm_name": "/noetl-1"}, "uri": "noetl://tenant/default/org/default/x"}}
    assert commit(client, fid, "w1", output_ref=durable).status_code == 200
    assert frames.frame(fid)["status"] == "COMMITTED"


def test_wrong_owner_unknown_ids_and_a_closed_stage_answer_stable_codes(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(frame_limit=1)
    fid = claim(client, stage_id, "w1").get_json()["frames"][0]["frame_id"]
    for call in (heartbeat(client, fid, "w2"), commit(client, fid, "w2")):
        assert call.status_code == 409 and call.get_json()["error"]["code"] == "lease_lost"
    assert claim(client, "999", "w1").get_json()["error"]["code"] == "stage_not_found"
    assert heartbeat(client, "999", "w1").get_json()["error"]["code"] == "frame_not_found"
    assert claim(client, stage_id, "w2").get_json()["frames"] == []  # the only frame is leased
    assert commit(client, fid, "w1").get_json()["stage_status"] == "COMPLETED"
    closed = claim(client, stage_id, "w1")
    assert closed.status_code == 409 and closed.get_json()["error"]["code"] == "stage_not_open"
    assert [e["event_type"] for e in frames.stage_events(stage_id)] == ["stage.opened", "stage.closed"]
    assert client.post(f"/api/stages/{stage_id}/frames/claim", json={}).status_code == 422
    unauthenticated = frames.client()
    unauthenticated.environ_base.pop("HTTP_AUTHORIZATION")
    assert claim(unauthenticated, stage_id, "w1").status_code == 401


def test_a_stage_closes_once_its_cursor_is_exhausted_and_its_last_frame_commits(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(max_rows=10)
    a, b = (f["frame_id"] for f in claim(client, stage_id, "w1", requested_count=2).get_json()["frames"])
    done = commit(client, a, "w1", row_count=4, cursor={"exhausted": True})
    assert done.get_json()["next_action"] == "stop" and done.get_json()["stage_status"] == "OPEN"  # b still open
    assert claim(client, stage_id, "w2").get_json()["frames"] == []  # exhausted: nothing is minted
    assert commit(client, b, "w1", row_count=0, cursor={"exhausted": True}).get_json()["stage_status"] == "COMPLETED"
    closed = frames.stage_events(stage_id)[-1]
    assert closed["event_type"] == "stage.closed" and closed["payload"]["rows"] == 4
    assert closed["payload"]["frames_committed"] == 2 and closed["stream_id"].startswith("execution/")
    detail = client.get(f"/api/stages/{stage_id}").get_json()
    assert (detail["status"], detail["rows_committed"], detail["frames_open"]) == ("COMPLETED", 4, 0)


def test_a_task_failure_commit_ends_the_frame_failed_and_the_stage_records_it(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage()
    fid = claim(client, stage_id, "w1").get_json()["frames"][0]["frame_id"]
    error = {"kind": "http_error", "message": "503 from the fixture", "row": 7}
    answer = commit(client, fid, "w1", status="FAILED", error=error, cursor={"exhausted": True})
    assert answer.get_json()["status"] == "FAILED" and answer.get_json()["stage_status"] == "FAILED"
    failed = frames.events(stage_id, "frame.failed")[0]["payload"]
    assert failed["reason"] == "task_failed" and failed["error"] == error and failed["retry_mode"] == "whole_frame"
    assert client.get(f"/api/stages/{stage_id}").get_json()["frames_failed"] == 1


def test_the_reaper_closes_the_open_stage_of_an_execution_that_ended(frames: Frames) -> None:
    eid = frames.execution(status="cancelled")
    stage_id = frames.stage(execution_id=eid)
    client = frames.client()
    assert client.post("/api/internal/frames/reap").get_json()["stages_closed"] == 1
    assert client.get(f"/api/stages/{stage_id}").get_json()["status"] == "CANCELLED"
    assert frames.stage_events(stage_id)[-1]["payload"]["reason"] == "execution_ended"


def test_the_backlog_metric_counts_pending_expired_and_mintable_frames(frames: Frames) -> None:
    client = frames.client()
    frames.stage(frame_limit=10)
    stage_id = frames.stage(frame_limit=5)
    claim(client, stage_id, "w1", requested_count=2, lease_seconds=600)
    body = client.get("/metrics").get_data(as_text=True)
    assert 'noetl_frame_backlog_total{tenant_id="default",organization_id="default"} 13' in body
    assert 'noetl_frame_leased{tenant_id="default",organization_id="default"} 2' in body
    assert "# TYPE noetl_frame_backlog_total gauge" in body


@pytest.mark.parametrize("lease", [0, -1, 7200])
def test_a_lease_outside_its_bounds_is_422(frames: Frames, lease: float) -> None:
    stage_id = frames.stage()
    assert claim(frames.client(), stage_id, "w1", lease_seconds=lease).status_code == 422


def test_the_role_builds_from_its_environment_without_connecting(database_url: str) -> None:
    from noetl_cloud.frames.app import app_from_env

    app = app_from_env({"NOETL_DATABASE_URL": database_url, "NOETL_INTERNAL_API_TOKEN": "x", "NOETL_PROJECT_ID": "p"})
    assert app.test_client().get("/healthz").get_json() == {"status": "ok", "role": "frames"}
    assert Settings.from_env({"NOETL_FRAMES_URL": "http://f"}).frames_url == "http://f"


# -- batch commit, and the commit that hands the next frames -------------------------------------


def batch(client: Any, stage_id: str, worker: str, commits: list[dict[str, Any]], **extra: Any) -> Any:
    body = {"worker_id": worker, "commits": commits, **extra}
    return client.post(f"/api/stages/{stage_id}/frames/commit", json=body)


def test_a_batch_commit_ends_each_frame_once_and_answers_each_on_its_own(frames: Frames) -> None:
    client = frames.client()
    stage_id, other_stage = frames.stage(), frames.stage()
    mine = [f["frame_id"] for f in claim(client, stage_id, "w1", requested_count=4).get_json()["frames"]]
    theirs = claim(client, stage_id, "w2").get_json()["frames"][0]["frame_id"]
    elsewhere = claim(client, other_stage, "w1").get_json()["frames"][0]["frame_id"]
    assert commit(client, mine[0], "w1").status_code == 200  # already terminal before the batch
    before = len(frames.events(stage_id))

    answer = batch(
        client,
        stage_id,
        "w1",
        [
            {"frame_id": mine[0], "status": "COMPLETED"},
            {"frame_id": mine[1], "status": "COMPLETED", "row_count": 7, "cursor": {"at": 7}},
            {"frame_id": mine[2], "status": "FAILED", "error": {"kind": "boom", "message": "it broke"}},
            {"frame_id": mine[3], "status": "COMPLETED", "row_count": 2},
            {"frame_id": theirs, "status": "COMPLETED"},
            {"frame_id": elsewhere, "status": "COMPLETED"},
            {"frame_id": "999", "status": "COMPLETED"},
        ],
    )
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    codes = [r["ok"] or r["error"]["code"] for r in body["results"]]
    assert codes == [
        "frame_already_terminal",
        True,
        True,
        True,
        "lease_lost",
        "frame_not_found",  # a frame of another stage is not this stage's
        "frame_not_found",
    ]
    assert [r.get("status") for r in body["results"][1:4]] == ["COMMITTED", "FAILED", "COMMITTED"]
    assert body["committed"] == 3 and body["stage_status"] == "OPEN" and body["next_action"] == "claim"
    assert "frames" not in body  # nothing asked to be claimed

    written = frames.events(stage_id)[before:]
    assert sorted(e["event_type"] for e in written) == ["frame.committed", "frame.committed", "frame.failed"]
    by_frame = {e["aggregate_id"]: e for e in written}
    assert set(by_frame) == {mine[1], mine[2], mine[3]}
    assert by_frame[mine[1]]["payload"]["row_count"] == 7 and by_frame[mine[1]]["stream_version"] == 2
    assert [r["terminal_event_id"] for r in body["results"][1:4]] == [str(by_frame[f]["event_id"]) for f in mine[1:4]]
    assert frames.frame(mine[1])["cursor"] == {"at": 7} and frames.frame(mine[1])["row_count"] == 7
    assert frames.frame(mine[2])["status"] == "FAILED" and frames.frame(mine[2])["error"]["kind"] == "boom"
    assert frames.frame(theirs)["status"] == "CLAIMED" and frames.frame(elsewhere)["status"] == "CLAIMED"
    assert frames.service.stage(int(stage_id))["frames_failed"] == 1

    again = batch(client, stage_id, "w1", [{"frame_id": mine[1], "status": "COMPLETED"}]).get_json()
    assert again["results"][0]["error"]["details"]["terminal_event_id"] == str(by_frame[mine[1]]["event_id"])
    assert len(frames.events(stage_id)) == before + 3  # the repeat wrote nothing


def test_a_commit_with_a_claim_hands_the_worker_its_next_frames(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage()
    first = claim(client, stage_id, "w1", requested_count=2).get_json()["frames"]
    answer = batch(
        client,
        stage_id,
        "w1",
        [{"frame_id": f["frame_id"], "status": "COMPLETED"} for f in first],
        claim={"requested_count": 3, "lease_seconds": 40},
    ).get_json()
    handed = answer["frames"]
    assert answer["committed"] == 2 and len(handed) == 3
    assert [f["frame_index"] for f in handed] == [2, 3, 4] and all(f["attempt"] == 1 for f in handed)
    assert all(frames.frame(f["frame_id"])["owner_worker"] == "w1" for f in handed)

    single = commit(client, handed[0]["frame_id"], "w1", claim={"requested_count": 1}).get_json()
    assert single["status"] == "COMMITTED" and [f["frame_index"] for f in single["frames"]] == [5]

    # An exhausted cursor stops the hand-off: no frame is minted past the end.
    last = commit(client, handed[1]["frame_id"], "w1", cursor={"exhausted": True}, claim={"requested_count": 2})
    assert last.get_json()["next_action"] == "stop" and last.get_json()["frames"] == []
    dispatched = frames.events(stage_id, "frame.dispatched")
    assert len(dispatched) == 6


def test_a_batch_commit_refuses_bad_batches_whole(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage()
    fid = claim(client, stage_id, "w1").get_json()["frames"][0]["frame_id"]
    twice = batch(client, stage_id, "w1", [{"frame_id": fid, "status": "COMPLETED"}] * 2)
    assert twice.status_code == 422 and twice.get_json()["error"]["code"] == "validation_failed"
    empty = batch(client, stage_id, "w1", [])
    assert empty.status_code == 422
    ipc_only = batch(client, stage_id, "w1", [{"frame_id": fid, "status": "COMPLETED", "output_ref": {"ipc": "x"}}])
    assert ipc_only.status_code == 422 and ipc_only.get_json()["error"]["code"] == "ipc_without_durable_ref"
    bad_claim = batch(client, stage_id, "w1", [{"frame_id": fid, "status": "COMPLETED"}], claim={"requested_count": 0})
    assert bad_claim.status_code == 422
    assert frames.frame(fid)["status"] == "CLAIMED"  # none of them wrote anything
    unknown = batch(client, "123", "w1", [{"frame_id": fid, "status": "COMPLETED"}])
    assert unknown.status_code == 404 and unknown.get_json()["error"]["code"] == "stage_not_found"
