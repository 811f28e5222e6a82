"""The lease guarantees of the frames API under concurrency, crashes and long frames (issue 8, Acceptance).

Workers are threads, each with its own client of one frames app (the HTTP surface and the service as
deployed, without processes): what is asserted is read back from the frame rows and their events.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from noetl_cloud.local.process import wait_until
from tests.integration.frame_fixtures import Frames, claim, commit, heartbeat
from tests.integration.frame_fixtures import frames as frames

WORKERS = 8
FRAMES = 2000


def _expired(frames: Frames, frame_id: str) -> bool:
    from sqlalchemy import text

    with frames.engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT lease_until < now() FROM frame WHERE frame_id = :f"), {"f": int(frame_id)}
            ).scalar()
        )


def test_eight_workers_on_one_stage_of_2000_frames_commit_each_frame_exactly_once(frames: Frames) -> None:
    stage_id = frames.stage(frame_limit=FRAMES, lease_seconds=120, heartbeat_seconds=30)
    held: dict[str, str] = {}
    overlaps: list[tuple[str, str, str]] = []
    lock = threading.Lock()
    done: Counter[str] = Counter()
    errors: list[Any] = []

    def work(worker: str) -> None:
        client = frames.client()
        while True:
            answer = claim(client, stage_id, worker, requested_count=2)
            if answer.status_code == 409:  # stage_not_open: every frame is committed
                return
            if answer.status_code != 200:
                errors.append(answer.get_json())
                return
            claimed = answer.get_json()["frames"]
            if not claimed:
                return
            for frame in claimed:
                fid = frame["frame_id"]
                with lock:
                    if fid in held:
                        overlaps.append((fid, held[fid], worker))
                    held[fid] = worker
                beat = heartbeat(client, fid, worker)
                with lock:
                    del held[fid]  # released before the commit: the lease ends with it
                result = commit(client, fid, worker, row_count=1)
                if beat.status_code != 200 or result.status_code != 200:
                    errors.append((beat.get_json(), result.get_json()))
                done[worker] += 1

    threads = [threading.Thread(target=work, args=(f"worker-{n}",)) for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == [] and overlaps == []
    # Every frame committed once; the claims really overlapped (which threads the scheduler runs is its business).
    assert sum(done.values()) == FRAMES and len(done) >= 2
    rows = frames.frames(stage_id)
    assert len(rows) == FRAMES and sorted(r["frame_index"] for r in rows) == list(range(FRAMES))
    assert {r["status"] for r in rows} == {"COMMITTED"} and {r["attempts"] for r in rows} == {1}
    events = frames.events(stage_id)
    per_frame: dict[str, list[str]] = defaultdict(list)
    for event in events:
        per_frame[event["aggregate_id"]].append(event["event_type"])
    assert len(per_frame) == FRAMES
    assert all(types == ["frame.dispatched", "frame.started", "frame.committed"] for types in per_frame.values())
    dispatched = {e["aggregate_id"]: e["payload"] for e in events if e["event_type"] == "frame.dispatched"}
    assert all(p["attempt"] == 1 for p in dispatched.values())
    owners = {str(r["frame_id"]): r["owner_worker"] for r in rows}
    assert all(dispatched[fid]["worker_id"] == owners[fid] for fid in owners)  # the committer held the lease
    assert frames.stage_events(stage_id)[-1]["payload"]["frames_committed"] == FRAMES


def test_a_worker_killed_mid_frame_is_abandoned_reclaimed_and_committed_once(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(frame_limit=1, lease_seconds=0.5, heartbeat_seconds=0.1)
    fid = claim(client, stage_id, "doomed").get_json()["frames"][0]["frame_id"]
    assert heartbeat(client, fid, "doomed").status_code == 200
    # The worker dies here: no more heartbeats, no commit.
    assert wait_until(lambda: _expired(frames, fid), timeout=10, interval=0.05)
    assert client.post("/api/internal/frames/reap").get_json()["released"] == 1  # proactively, before any claim
    again = claim(client, stage_id, "rescuer", lease_seconds=30).get_json()["frames"]
    assert [(f["frame_id"], f["attempt"]) for f in again] == [(fid, 2)]
    late = commit(client, fid, "doomed")  # the dead worker's late commit (say, a zombie) is refused
    assert late.status_code == 409 and late.get_json()["error"]["code"] == "lease_lost"
    assert heartbeat(client, fid, "rescuer").status_code == 200
    assert commit(client, fid, "rescuer").status_code == 200

    types = [e["event_type"] for e in frames.events(stage_id)]
    assert types == [
        "frame.dispatched",
        "frame.started",
        "frame.abandoned",
        "frame.dispatched",
        "frame.started",
        "frame.committed",
    ]
    abandoned = frames.events(stage_id, "frame.abandoned")[0]["payload"]
    assert abandoned["previous_worker_id"] == "doomed" and abandoned["reclaimer"] == "reaper"
    assert abandoned["retry_mode"] == "whole_frame" and abandoned["row_split_retry"] is False
    row = frames.frame(fid)
    assert (row["status"], row["attempts"], row["owner_worker"]) == ("COMMITTED", 2, "rescuer")


def test_a_claim_reclaims_an_expired_lease_itself_with_abandoned_before_dispatched(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(frame_limit=1, lease_seconds=0.3, heartbeat_seconds=0.1)
    fid = claim(client, stage_id, "doomed").get_json()["frames"][0]["frame_id"]
    assert wait_until(lambda: _expired(frames, fid), timeout=10, interval=0.05)
    again = claim(client, stage_id, "rescuer", lease_seconds=30).get_json()["frames"]
    assert [(f["frame_id"], f["attempt"]) for f in again] == [(fid, 2)]
    events = frames.events(stage_id)
    assert [e["event_type"] for e in events] == ["frame.dispatched", "frame.abandoned", "frame.dispatched"]
    assert events[1]["payload"]["reclaimer"] == "rescuer" and events[2]["payload"]["reason"] == "lease_expired"


def test_a_frame_failing_every_attempt_ends_failed_with_max_attempts_after_exactly_max_attempts(frames: Frames) -> None:
    client = frames.client()
    stage_id = frames.stage(frame_limit=1, lease_seconds=0.3, heartbeat_seconds=0.1, max_attempts=3)
    fid = None
    for attempt in (1, 2, 3):
        got = claim(client, stage_id, f"crasher-{attempt}").get_json()["frames"]
        assert [f["attempt"] for f in got] == [attempt]
        fid = got[0]["frame_id"]
        assert heartbeat(client, fid, f"crasher-{attempt}").status_code == 200  # then the worker dies
        assert wait_until(lambda f=fid: _expired(frames, f), timeout=10, interval=0.05)
        if attempt < 3:
            assert client.post("/api/internal/frames/reap").get_json()["released"] == 1
    assert fid is not None
    reaped = client.post("/api/internal/frames/reap").get_json()
    assert reaped["failed"] == 1 and reaped["stages_closed"] == 1
    assert claim(client, stage_id, "late").get_json()["error"]["code"] == "stage_not_open"

    events = frames.events(stage_id)
    assert Counter(e["event_type"] for e in events)["frame.dispatched"] == 3
    failed = [e for e in events if e["event_type"] == "frame.failed"]
    assert len(failed) == 1 and failed[0]["payload"]["reason"] == "max_attempts"
    assert failed[0]["payload"]["attempt"] == 3 and events[-1]["event_type"] == "frame.failed"
    row = frames.frame(fid)
    assert (row["status"], row["attempts"]) == ("FAILED", 3)
    stage = client.get(f"/api/stages/{stage_id}").get_json()
    assert (stage["status"], stage["frames_failed"]) == ("FAILED", 1)
    assert frames.stage_events(stage_id)[-1]["payload"]["frames_failed"] == 1


def test_a_frame_running_three_times_its_lease_with_heartbeats_every_quarter_lease_is_never_abandoned(
    frames: Frames,
) -> None:
    lease = 0.8
    stage_id = frames.stage(frame_limit=2, lease_seconds=lease, heartbeat_seconds=lease / 4)
    client = frames.client()
    fid = claim(client, stage_id, "steady").get_json()["frames"][0]["frame_id"]
    assert heartbeat(client, fid, "steady").status_code == 200
    stop = threading.Event()
    beats: list[int] = []
    rivals: list[list[dict[str, Any]]] = []

    def beat() -> None:
        own = frames.client()
        while not stop.wait(lease / 4):
            beats.append(heartbeat(own, fid, "steady").status_code)

    def rival() -> None:  # claims and reaps all along: any lapse of the lease would be taken at once
        own = frames.client()
        while not stop.is_set():
            own.post("/api/internal/frames/reap")
            got = claim(own, stage_id, "rival", lease_seconds=60).get_json().get("frames", [])
            rivals.append(got)

    threads = [threading.Thread(target=beat), threading.Thread(target=rival)]
    for thread in threads:
        thread.start()
    # The frame's body: it runs until three leases' worth of heartbeats were accepted.
    assert wait_until(lambda: beats.count(200) >= 12, timeout=30, interval=0.02)
    stop.set()
    for thread in threads:
        thread.join()
    assert commit(client, fid, "steady").status_code == 200

    assert set(beats) == {200}
    taken = {f["frame_id"] for got in rivals for f in got}
    assert fid not in taken  # the rival only ever got the stage's other frame
    types = [e["event_type"] for e in frames.events(stage_id) if e["aggregate_id"] == fid]
    assert "frame.abandoned" not in types and types.count("frame.dispatched") == 1
    assert types[-1] == "frame.committed" and types.count("frame.heartbeat") >= 12
    assert frames.frame(fid)["attempts"] == 1
