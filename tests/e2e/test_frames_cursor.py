"""A cursor loop on the local stack: execute → Pub/Sub emulator push → worker slots → frames role
(claim / heartbeat / commit over HTTP) → rows saved by the postgres tool, Arrow IPC rows on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.local.process import wait_until
from noetl_cloud.payload import load_rows
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import free_port, start
from tests.e2e.test_distributed import _sql, cluster
from tests.integration.control_fixtures import TOKEN, Topics
from tests.integration.test_cursor_loops import CLAIM, _indent

PLAYBOOK = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor_e2e, path: e2e/cursor}}
workload: {{facility: f1, dsn: ""}}
workflow:
  - step: fetch
    loop:
      iterator: patient
      cursor:
        kind: postgres
        dsn: "{{{{ workload.dsn }}}}"
        claim: |
{_indent(CLAIM, 10)}
        params: {{frame_id: "{{{{ __frame_id }}}}", facility: "{{{{ workload.facility }}}}"}}
      spec:
        mode: cursor
        max_in_flight: 2
        frame: {{max_rows: 25, process: frame, lease_seconds: 30, heartbeat_seconds: 1}}
    tool:
      - save:
          kind: python
          args: {{dsn: "{{{{ workload.dsn }}}}", rows: "{{{{ frame.rows }}}}", fid: "{{{{ frame.id }}}}"}}
          code: |
            def main(dsn, rows, fid):
                import pg8000.native, urllib.parse as u
                p = u.urlparse(dsn)
                c = pg8000.native.Connection(p.username, host=p.hostname, port=p.port,
                                             database=p.path.lstrip("/"), password=p.password)
                for r in rows:
                    c.run("INSERT INTO cursor_out (patient, frame_id) VALUES (:p, :f)", p=r["patient"], f=int(fid))
                c.close()
                return len(rows)
"""


@pytest.fixture
def frames_url(database_url: str, local_env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    env = {**local_env, "NOETL_DATABASE_URL": database_url, "NOETL_INTERNAL_API_TOKEN": TOKEN}
    proc = start("frames", env, port, workers=1, threads=8)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        from noetl_cloud.local.process import stop_group

        stop_group(proc.pid)
        proc.wait()


def test_a_cursor_loop_runs_its_frames_through_the_frames_role_and_saves_every_row_once(
    database_url: str,
    local_env: dict[str, str],
    topic_prefix: str,
    topics: Topics,
    frames_url: str,
    tmp_path: Path,
) -> None:
    _sql(
        database_url, "CREATE TABLE cursor_queue (id serial PRIMARY KEY, facility text, patient text, frame_id bigint)"
    )
    _sql(database_url, "CREATE TABLE cursor_out (patient text NOT NULL, frame_id bigint NOT NULL)")
    _sql(
        database_url,
        "INSERT INTO cursor_queue (facility, patient) SELECT 'f1', 'p' || g FROM generate_series(1, 120) g",
    )
    extra = {
        "NOETL_FRAMES_URL": frames_url,
        "NOETL_PAYLOAD_BACKEND": "filesystem",
        "NOETL_PAYLOAD_DIR": str(tmp_path),
    }
    with cluster(database_url, local_env, topic_prefix, **extra) as stack:
        stack.register(PLAYBOOK)
        eid = stack.execute("e2e/cursor", {"dsn": database_url})
        detail = stack.wait(eid, timeout=120)
        events = stack.events(eid)
    assert detail["status"] == "completed", detail["error"]
    assert _sql(database_url, "SELECT count(*), count(DISTINCT patient) FROM cursor_out") == [(120, 120)]
    assert sum(slot["rows"] for slot in detail["results"]["fetch"]) == 120
    types = [e["event_type"] for e in events]
    assert types.count("stage.opened") == 1 and types.count("stage.closed") == 1
    committed = _sql(
        database_url,
        "SELECT payload FROM event WHERE execution_id = :e AND event_type = 'frame.committed' ORDER BY position",
        e=int(eid),
    )
    counts = sorted(row[0]["row_count"] for row in committed)
    assert sum(counts) == 120 and max(counts) == 25
    store = FilesystemPayloadStore(tmp_path, tenant_id="default", organization_id="default")
    stored = [row[0]["output_ref"]["rows_ref"] for row in committed if row[0]["row_count"]]
    assert sum(len(load_rows(store, ref)) for ref in stored) == 120


KILLABLE = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor_kill, path: e2e/cursor_kill}}
workload: {{facility: f1, dsn: "", gate: "", marker: ""}}
workflow:
  - step: fetch
    loop:
      iterator: patient
      cursor:
        kind: postgres
        dsn: "{{{{ workload.dsn }}}}"
        claim: |
{_indent(CLAIM, 10)}
        params: {{frame_id: "{{{{ __frame_id }}}}", facility: "{{{{ workload.facility }}}}"}}
      spec:
        mode: cursor
        max_in_flight: 1
        frame: {{max_rows: 10, process: frame, lease_seconds: 2, heartbeat_seconds: 0.5, max_attempts: 3}}
    tool:
      - save:
          kind: python
          args:
            dsn: "{{{{ workload.dsn }}}}"
            rows: "{{{{ frame.rows }}}}"
            fid: "{{{{ frame.id }}}}"
            index: "{{{{ frame.index }}}}"
            attempt: "{{{{ frame.attempt }}}}"
            gate: "{{{{ workload.gate }}}}"
            marker: "{{{{ workload.marker }}}}"
          code: |
            def main(dsn, rows, fid, index, attempt, gate, marker):
                import os, pathlib, time, pg8000.native, urllib.parse as u
                if int(index) == 0 and int(attempt) == 1:  # the first frame's first attempt hangs mid-frame
                    pathlib.Path(marker).touch()
                    while not os.path.exists(gate):
                        time.sleep(0.05)
                p = u.urlparse(dsn)
                c = pg8000.native.Connection(p.username, host=p.hostname, port=p.port,
                                             database=p.path.lstrip("/"), password=p.password)
                for r in rows:
                    c.run("INSERT INTO cursor_out (patient, frame_id) VALUES (:p, :f)", p=r["patient"], f=int(fid))
                c.close()
                return len(rows)
"""


def test_a_worker_process_killed_mid_frame_leaves_the_frame_abandoned_reclaimed_and_committed_once(
    database_url: str,
    local_env: dict[str, str],
    topic_prefix: str,
    topics: Topics,
    frames_url: str,
    tmp_path: Path,
) -> None:
    _sql(
        database_url, "CREATE TABLE cursor_queue (id serial PRIMARY KEY, facility text, patient text, frame_id bigint)"
    )
    _sql(database_url, "CREATE TABLE cursor_out (patient text NOT NULL, frame_id bigint NOT NULL)")
    _sql(
        database_url, "INSERT INTO cursor_queue (facility, patient) SELECT 'f1', 'p' || g FROM generate_series(1, 30) g"
    )
    gate, marker = tmp_path / "gate", tmp_path / "mid-frame"
    frames = ApiClient(frames_url, token_source=static_token(TOKEN), timeout_s=30)
    workload = {"dsn": database_url, "gate": str(gate), "marker": str(marker)}
    with cluster(
        database_url, local_env, topic_prefix, NOETL_COMMAND_LEASE_S="2", NOETL_FRAMES_URL=frames_url
    ) as stack:
        stack.register(KILLABLE)
        eid = stack.execute("e2e/cursor_kill", workload)

        def running() -> list[Any]:
            return _sql(database_url, "SELECT frame_id, owner_worker FROM frame WHERE status = 'RUNNING'")

        assert wait_until(lambda: marker.exists() and bool(running()), timeout=60, interval=0.1)
        (fid, doomed), *_ = running()
        port = stack.workers["shared"][1]
        stack.kill_worker("shared")  # SIGKILL to the worker's process group, inside the frame's body
        replacement = {**stack.worker_env("shared", port), "NOETL_WORKER_ID": "replacement"}
        stack.workers["shared"] = (start("worker", replacement, port, workers=1, threads=8), port)
        # The scheduled reaper (POST /api/internal/frames/reap) releases the lease once it expired.
        assert wait_until(
            lambda: frames.post("/api/internal/frames/reap").raise_for_error().json["released"] == 1,
            timeout=30,
            interval=0.2,
        )
        # The control plane's reaper re-issues the dead worker's slot command; the replacement runs it.
        assert wait_until(
            lambda: stack.api.post("/api/internal/reaper").raise_for_error().json["reissued"] == 1,
            timeout=30,
            interval=0.2,
        )
        detail = stack.wait(eid, timeout=120)
    frames.close()
    assert detail["status"] == "completed", detail["error"]

    # Every row saved exactly once, the killed frame's rows by its second attempt.
    assert _sql(database_url, "SELECT count(*), count(DISTINCT patient) FROM cursor_out") == [(30, 30)]
    assert _sql(database_url, "SELECT count(*) FROM cursor_out WHERE frame_id = :f", f=fid) == [(10,)]
    rows = _sql(
        database_url,
        "SELECT event_type, payload FROM event WHERE aggregate_type = 'frame' AND aggregate_id = :f ORDER BY position",
        f=str(fid),
    )
    types = [t for t, _ in rows if t != "frame.heartbeat"]
    assert types == [
        "frame.dispatched",
        "frame.started",
        "frame.abandoned",
        "frame.dispatched",
        "frame.started",
        "frame.committed",
    ]
    payloads = [p for t, p in rows if t != "frame.heartbeat"]
    assert payloads[0]["worker_id"] == doomed and payloads[0]["attempt"] == 1
    assert payloads[2]["reclaimer"] == "reaper" and payloads[2]["previous_worker_id"] == doomed
    assert (payloads[3]["worker_id"], payloads[3]["attempt"]) == ("replacement", 2)
    assert (payloads[5]["attempt"], payloads[5]["row_count"]) == (2, 10)
    # Every frame of the stage committed exactly once; none failed.
    committed = _sql(
        database_url,
        "SELECT aggregate_id, count(*) FROM event WHERE execution_id = :e AND event_type = 'frame.committed' "
        "GROUP BY 1",
        e=int(eid),
    )
    assert {n for _, n in committed} == {1}
    assert _sql(
        database_url, "SELECT count(*) FROM event WHERE execution_id = :e AND event_type = 'frame.failed'", e=int(eid)
    ) == [(0,)]
    assert _sql(database_url, "SELECT status, attempts FROM frame WHERE frame_id = :f", f=fid) == [("COMMITTED", 2)]
