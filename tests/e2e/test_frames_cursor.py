"""A cursor loop on the local stack: execute → Pub/Sub emulator push → worker slots → frames role
(claim / heartbeat / commit over HTTP) → rows saved by the postgres tool, Arrow IPC rows on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_cloud.payload import load_rows
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
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
