"""The lease guarantees of the frames API under concurrency, crashes and long frames (issue 8, Acceptance).

Workers are threads, each with its own client of one frames app (the HTTP surface and the service as
deployed, without processes): what is asserted is read back from the frame rows and their events.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from noetl_cloud.local.process import wait_until
from tests.integration.frame_fixtures import Frames, claim, commit, heartbeat
from tests.integration.frame_fixtures import frames as frames

WORKERS = 8
FRAMES = 2000
LOST = ("lease_lost", "frame_already_terminal")


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


def test_eight_workers_with_crashes_and_expiring_leases_never_share_a_live_lease_and_commit_each_frame_once(
    frames: Frames,
) -> None:
    """The same stage of 2,000 frames, with churn: every 20th frame's first holder dies (no heartbeat, no
    commit), leases are one second, a reaper runs all along. Each attempt's lease window is read from the
    database's own timestamps (``lease_until`` of the claim and of every accepted heartbeat): the next
    attempt of a frame must start after the previous one's lease ended."""
    lease = 1.0
    stage_id = frames.stage(frame_limit=FRAMES, lease_seconds=lease, heartbeat_seconds=0.25, max_attempts=20)
    windows: dict[str, list[list[Any]]] = defaultdict(list)  # frame → [attempt, worker, start, end] per claim
    lock = threading.Lock()
    committed: Counter[str] = Counter()
    crashed: dict[str, str] = {}
    refused: Counter[str] = Counter()
    errors: list[Any] = []
    stop = threading.Event()

    def work(worker: str) -> None:
        client = frames.client()
        while not stop.is_set():
            answer = claim(client, stage_id, worker, requested_count=2)
            if answer.status_code == 409:  # stage_not_open: every frame is committed
                return
            if answer.status_code != 200:
                errors.append(answer.get_json())
                return
            claimed = answer.get_json()["frames"]
            if not claimed:  # the dead workers' frames come back once their leases expire
                stop.wait(0.05)
                continue
            for frame in claimed:
                fid, attempt = frame["frame_id"], frame["attempt"]
                until = datetime.fromisoformat(frame["lease_until"])
                window = [attempt, worker, until - timedelta(seconds=lease), until]
                with lock:
                    windows[fid].append(window)
                if frame["frame_index"] % 20 == 0 and attempt == 1:
                    crashed[fid] = worker  # this holder dies here
                    continue
                beat = heartbeat(client, fid, worker)
                if beat.status_code == 200:
                    window[3] = max(window[3], datetime.fromisoformat(beat.get_json()["lease_until"]))
                    result = commit(client, fid, worker, row_count=1)
                else:
                    result = beat
                if result.status_code == 200:
                    with lock:
                        committed[fid] += 1
                elif result.status_code == 409 and result.get_json()["error"]["code"] in LOST:
                    refused[fid] += 1  # slower than its lease: another worker reclaimed (and maybe committed) it
                else:
                    errors.append(result.get_json())

    def reaper() -> None:
        client = frames.client()
        while not stop.wait(0.2):
            reaped = client.post("/api/internal/frames/reap")
            if reaped.status_code != 200:
                errors.append(reaped.get_json())

    threads = [threading.Thread(target=work, args=(f"worker-{n}",)) for n in range(WORKERS)]
    threads.append(threading.Thread(target=reaper))
    for thread in threads:
        thread.start()
    for thread in threads[:WORKERS]:
        thread.join()
    stop.set()
    threads[-1].join()

    assert errors == []
    assert len(crashed) == FRAMES // 20
    # No frame held by two live leases: attempts 1..k, each claimed once, each after the last one's lease ended.
    assert len(windows) == FRAMES
    for fid, held in windows.items():
        held.sort(key=lambda w: w[0])
        assert [w[0] for w in held] == list(range(1, len(held) + 1)), (fid, held)
        for before, after in itertools.pairwise(held):
            assert after[2] > before[3], (fid, before, after)
    # Every frame committed exactly once (by the workers' count and by the event log).
    assert set(committed) == set(windows) and set(committed.values()) == {1}
    events = frames.events(stage_id)
    per_frame: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        per_frame[event["aggregate_id"]].append(event)
    assert {fid: [e["event_type"] for e in got].count("frame.committed") for fid, got in per_frame.items()} == {
        fid: 1 for fid in windows
    }
    assert not any(e["event_type"] == "frame.failed" for e in events)
    # Attempts recorded: the row's count, one frame.dispatched per claim, a frame.abandoned before each reclaim.
    rows = {str(r["frame_id"]): r for r in frames.frames(stage_id)}
    assert {r["status"] for r in rows.values()} == {"COMMITTED"}
    for fid, got in per_frame.items():
        types = [e["event_type"] for e in got]
        dispatched = [e["payload"] for e in got if e["event_type"] == "frame.dispatched"]
        assert rows[fid]["attempts"] == len(windows[fid]) == len(dispatched)
        assert [p["attempt"] for p in dispatched] == list(range(1, len(dispatched) + 1))
        assert [p["worker_id"] for p in dispatched] == [w[1] for w in windows[fid]]
        assert types.count("frame.abandoned") == len(dispatched) - 1
        assert types[-1] == "frame.committed" and got[-1]["payload"]["attempt"] == len(dispatched)
    for fid, worker in crashed.items():
        abandoned = next(e["payload"] for e in per_frame[fid] if e["event_type"] == "frame.abandoned")
        assert (abandoned["attempt"], abandoned["previous_worker_id"]) == (1, worker)
        assert rows[fid]["attempts"] >= 2
    assert sum(refused.values()) == sum(len(w) for w in windows.values()) - FRAMES - len(crashed)


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
