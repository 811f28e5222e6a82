"""Cursor loops end to end in-process: the control plane issues a cursor loop's slots, each slot claims
frames from the frames API, claims rows with the postgres cursor driver, runs the pipeline per row or per
frame, writes the rows as Arrow IPC, and commits one event per frame (real PostgreSQL, filesystem payloads).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.db.engine import normalize_url
from noetl_cloud.engine import FakeClock
from noetl_cloud.frames.worker import cursor_plan, run_cursor_slot
from noetl_cloud.payload import load_rows
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
from noetl_cloud.tools.registry import default_registry
from noetl_cloud.web.client import ApiResponse, UpstreamUnavailable
from noetl_cloud.worker.run import PlanCache, run_command
from tests.integration.control_fixtures import Topics, register
from tests.integration.frame_fixtures import Frames
from tests.integration.frame_fixtures import frames as frames
from tests.unit.engine.conftest import LOOPBACK_ALLOW

LEASE = 2.0
CLAIM = """\
UPDATE cursor_queue q SET frame_id = CAST(:frame_id AS bigint)
WHERE q.frame_id = CAST(:frame_id AS bigint) OR q.id IN (
  SELECT id FROM cursor_queue WHERE frame_id IS NULL AND facility = :facility ORDER BY id
  LIMIT greatest({{ __frame_max_rows }} - (SELECT count(*) FROM cursor_queue WHERE frame_id = {{ __frame_id }}), 0)
  FOR UPDATE SKIP LOCKED)
RETURNING q.id, q.patient
"""
SAVE_FRAME = (
    "INSERT INTO cursor_out (patient, frame_id) SELECT p->>'patient', CAST(:fid AS bigint) "
    "FROM jsonb_array_elements(CAST(:rows AS jsonb)) p"
)


def playbook(process: str, max_rows: int, slots: int, *, fail_on: str = "") -> str:
    task = (
        SAVE_FRAME
        if process == "frame"
        else "INSERT INTO cursor_out (patient, frame_id) VALUES (:patient, CAST(:fid AS bigint))"
    )
    params = (
        '{rows: "{{ frame.rows }}", fid: "{{ frame.id }}"}'
        if process == "frame"
        else '{patient: "{{ iter.patient.patient }}", fid: "{{ iter.frame.id }}"}'
    )
    guard = (
        '\n      - check:\n          kind: python\n          args: {p: "{{ iter.patient.patient }}"}\n'
        "          code: |\n            def main(p):\n"
        f"                assert p != '{fail_on}'\n                return p"
        if fail_on
        else ""
    )
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor_{process}, path: tests/cursor_{process}_{max_rows}_{slots}{fail_on}}}
workload: {{facility: f1}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next: [{{step: fetch}}]
  - step: fetch
    loop:
      iterator: patient
      cursor:
        kind: postgres
        auth: pg
        claim: |
{_indent(CLAIM, 10)}
        params: {{frame_id: "{{{{ __frame_id }}}}", facility: "{{{{ workload.facility }}}}"}}
      spec:
        mode: cursor
        max_in_flight: {slots}
        frame: {{max_rows: {max_rows}, process: {process}, lease_seconds: 60, heartbeat_seconds: 20}}
    tool:{guard}
      - save:
          kind: postgres
          auth: pg
          command: "{task}"
          params: {params}
    next: [{{step: end}}]
  - step: end
    tool: {{kind: noop}}
"""


def _indent(block: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in block.splitlines())


class FlaskApi:
    """The worker's API port over Flask test clients, one per thread (the frame heartbeats run on their own)."""

    def __init__(self, clients: Callable[[], FlaskClient]) -> None:
        self.clients = clients
        self.local = threading.local()
        self.posts: Counter[str] = Counter()  # POSTs per kind of route (the last path segment)
        self.lock = threading.Lock()

    @property
    def client(self) -> FlaskClient:
        if not hasattr(self.local, "client"):
            self.local.client = self.clients()
        return self.local.client  # type: ignore[no-any-return]

    def get(self, path: str) -> ApiResponse:
        r = self.client.get(path)
        return ApiResponse(r.status_code, r.get_json(silent=True), dict(r.headers))

    def post(self, path: str, json: Any = None) -> ApiResponse:
        with self.lock:
            self.posts[path.rsplit("/", 1)[1]] += 1
        r = self.client.post(path, json=json)
        return ApiResponse(r.status_code, r.get_json(silent=True), dict(r.headers))


class CursorDriver:
    """Runs every issued command of an execution like a worker: cursor slots through the frames API."""

    def __init__(self, client: FlaskClient, plane: ControlPlane, frames: Frames, database_url: str, root: Path):
        self.client, self.plane = client, plane
        self.frames_api = FlaskApi(frames.client)
        self.payloads = FilesystemPayloadStore(root, tenant_id="default", organization_id="default")
        self.keychain = {"pg": {"dsn": database_url}}
        self.tools: Any = default_registry(http_allow=LOOPBACK_ALLOW)
        self.plans = PlanCache()
        self.clock: Callable[[], Any] = FakeClock  # each slot's clock (tests/integration/test_frame_bounds.py)

    def run(self, path: str, workload: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.client.post("/api/execute", json={"path": path, "workload": workload or {}})
        eid = answer.get_json()["execution_id"]
        for _ in range(100):
            detail = self.client.get(f"/api/executions/{eid}").get_json()
            if detail["status"] in ("completed", "failed", "cancelled"):
                return detail
            with self.plane.engine.connect() as conn:
                issued = (
                    conn.execute(
                        text("SELECT command_id FROM command WHERE execution_id = :e AND status = 'issued' ORDER BY 1"),
                        {"e": int(eid)},
                    )
                    .scalars()
                    .all()
                )
            assert issued, detail
            for cid in issued:
                command = self.client.post(f"/api/commands/{cid}/claim", json={"worker_id": "w1"}).get_json()
                plan = cursor_plan(command, self.plans)
                if plan is not None:
                    report = run_cursor_slot(
                        command,
                        plan,
                        frames=self.frames_api,
                        worker_id="w1",
                        tools=self.tools,
                        payloads=self.payloads,
                        keychain=self.keychain,
                        clock=self.clock(),
                    )
                else:
                    report = run_command(command, tools=self.tools, keychain=self.keychain, compiled=self.plans)
                body = report.to_body("w1", command["attempt"], command["command_id"])
                assert self.client.post("/api/events", json=body).status_code == 200
        raise AssertionError("the execution did not end")


@pytest.fixture
def driver(
    client: FlaskClient, plane: ControlPlane, topics: Topics, frames: Frames, database_url: str, tmp_path: Path
) -> CursorDriver:
    engine = create_engine(normalize_url(database_url))
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE cursor_queue (id serial PRIMARY KEY, facility text NOT NULL, patient text NOT NULL, "
                "frame_id bigint)"
            )
        )
        conn.execute(text("CREATE TABLE cursor_out (patient text NOT NULL, frame_id bigint NOT NULL)"))
        conn.execute(
            text(
                "INSERT INTO cursor_queue (facility, patient) SELECT 'f1', 'p' || g FROM generate_series(1, 230) g "
                "UNION ALL SELECT 'f2', 'other' || g FROM generate_series(1, 5) g"
            )
        )
    engine.dispose()
    return CursorDriver(client, plane, frames, database_url, tmp_path)


def _sql(driver: CursorDriver, statement: str) -> list[Any]:
    with driver.plane.engine.connect() as conn:
        return list(conn.execute(text(statement)).all())


def _events(driver: CursorDriver, eid: str) -> list[dict[str, Any]]:
    return driver.client.get(f"/api/executions/{eid}/events").get_json()["events"]


def test_a_frame_mode_cursor_loop_runs_its_pipeline_once_per_frame_and_commits_one_event_per_frame(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    register(client, playbook("frame", 50, 3))
    detail = driver.run("tests/cursor_frame_50_3")
    assert detail["status"] == "completed", detail["error"]
    assert sorted(r[0] for r in _sql(driver, "SELECT patient FROM cursor_out")) == sorted(
        f"p{i}" for i in range(1, 231)
    )
    assert _sql(driver, "SELECT count(*) FROM cursor_queue WHERE facility = 'f2' AND frame_id IS NOT NULL") == [(0,)]
    slots = detail["results"]["fetch"]
    assert len(slots) == 3 and sum(s["rows"] for s in slots) == 230

    stage = _sql(driver, "SELECT stage_id, status FROM stage")
    assert len(stage) == 1 and stage[0][1] == "COMPLETED"
    stage_id = str(stage[0][0])
    committed = frames.events(stage_id, "frame.committed")
    assert [e["payload"]["row_count"] for e in committed] == [50, 50, 50, 50, 30]
    # one pipeline run (task.started + task.done) per frame, counted, not written
    assert {e["payload"]["events_emitted"] for e in committed} == {2}
    first = committed[0]
    assert first["payload_ref"]["media_type"] == "application/vnd.apache.arrow.stream"
    rows = load_rows(driver.payloads, first["payload"]["output_ref"]["rows_ref"])
    assert len(rows) == 50 and {"id", "patient"} <= set(rows[0])
    eid = str(detail["execution_id"])
    types = Counter(e["event_type"] for e in _events(driver, eid))
    assert types["stage.opened"] == 1 and types["stage.closed"] == 1 and types["loop.done"] == 1
    assert types["command.issued"] == 5  # start, 3 slots, end: no command per row
    assert types["task.started"] == 2  # start and end; frame tasks are counted in their commits


def test_a_row_mode_cursor_loop_runs_its_pipeline_once_per_row_in_one_row_frames(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    register(client, playbook("row", 1, 2))
    detail = driver.run("tests/cursor_row_1_2")
    assert detail["status"] == "completed", detail["error"]
    assert _sql(driver, "SELECT count(DISTINCT patient), count(*) FROM cursor_out") == [(230, 230)]
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    committed = frames.events(stage_id, "frame.committed")
    assert Counter(e["payload"]["row_count"] for e in committed) == {1: 230, 0: 1}  # the empty one exhausts
    slots = detail["results"]["fetch"]
    assert sum(s["rows"] for s in slots) == 230
    # Each commit leases its slot's next frame: a slot claims on its own once, not once per frame.
    assert driver.frames_api.posts["commit"] == 231
    assert driver.frames_api.posts["claim"] <= 2 * len(slots)
    assert sum(s["claims"] for s in slots) >= 231  # the claims folded into commits are still counted


def test_a_failing_frame_is_committed_failed_and_the_loop_step_fails(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    register(client, playbook("row", 10, 1, fail_on="p15"))
    detail = driver.run("tests/cursor_row_10_1p15")
    assert detail["status"] == "failed"
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    failed = frames.events(stage_id, "frame.failed")
    assert len(failed) == 1 and failed[0]["payload"]["row_count"] == 10
    assert failed[0]["payload"]["error"]["row"] == 4  # p15 is the 5th row of the second frame
    assert _sql(driver, "SELECT status, frames_failed FROM stage") == [("FAILED", 1)]
    # the other frames ran to their end: every row but the failed frame's was saved
    assert _sql(driver, "SELECT count(*) FROM cursor_out") == [(220 + 4,)]


LONG_FRAME = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cursor_long_frame, path: tests/cursor_long_frame}}
workload: {{facility: f1, dsn: ""}}
workflow:
  - step: fetch
    loop:
      iterator: patient
      cursor:
        kind: postgres
        auth: pg
        claim: |
{_indent(CLAIM, 10)}
        params: {{frame_id: "{{{{ __frame_id }}}}", facility: "{{{{ workload.facility }}}}"}}
      spec:
        mode: cursor
        max_in_flight: 1
        frame: {{max_rows: 100, process: frame, lease_seconds: {LEASE}, heartbeat_seconds: {LEASE / 4}}}
    tool:
      - body:
          kind: python
          args: {{dsn: "{{{{ workload.dsn }}}}", fid: "{{{{ frame.id }}}}", index: "{{{{ frame.index }}}}"}}
          code: |
            def main(dsn, fid, index):
                import time, pg8000.native, urllib.parse as u
                p = u.urlparse(dsn)
                c = pg8000.native.Connection(p.username, host=p.hostname, port=p.port,
                                             database=p.path.lstrip("/"), password=p.password)
                deadline = time.monotonic() + 120
                # The first frame's body runs until its worker heartbeated it 12 times after frame.started.
                beats = "SELECT heartbeats FROM frame WHERE frame_id = :f"
                while int(index) == 0 and c.run(beats, f=int(fid))[0][0] < 13:
                    assert time.monotonic() < deadline, "the worker stopped heartbeating"
                    time.sleep(0.05)
                c.close()
                return index
      - save:
          kind: postgres
          auth: pg
          command: "{SAVE_FRAME}"
          params: {{rows: "{{{{ frame.rows }}}}", fid: "{{{{ frame.id }}}}"}}
"""


def test_the_worker_heartbeats_a_frame_running_three_leases_long_and_it_is_never_abandoned(
    driver: CursorDriver, client: FlaskClient, frames: Frames, database_url: str
) -> None:
    register(client, LONG_FRAME)
    stop = threading.Event()
    reaped: list[dict[str, Any]] = []

    def reaper() -> None:  # any lapse of the lease would be released at once
        own = frames.client()
        while not stop.wait(0.05):
            reaped.append(own.post("/api/internal/frames/reap").get_json())

    thread = threading.Thread(target=reaper)
    thread.start()
    try:
        detail = driver.run("tests/cursor_long_frame", {"dsn": database_url})
    finally:
        stop.set()
        thread.join()
    assert detail["status"] == "completed", detail["error"]
    assert _sql(driver, "SELECT count(*), count(DISTINCT patient) FROM cursor_out") == [(230, 230)]
    assert len(reaped) > 0 and sum(r["released"] for r in reaped) == 0
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    first = next(f for f in frames.frames(stage_id) if f["frame_index"] == 0)
    types = [e["event_type"] for e in frames.events(stage_id) if e["aggregate_id"] == str(first["frame_id"])]
    assert types.count("frame.dispatched") == 1 and "frame.abandoned" not in types
    assert types.count("frame.heartbeat") >= 12 and types[-1] == "frame.committed"
    assert (first["status"], first["attempts"], first["row_count"]) == ("COMMITTED", 1, 100)
    # Its body ran at least three leases: twelve heartbeats a quarter lease apart.
    assert first["output_ref"]["metrics"]["ms"] >= 3 * LEASE * 1000


class CommitsUnreachable(FlaskApi):
    """The frames API unreachable for the first ``failures`` commits (its instance restarting)."""

    def __init__(self, clients: Callable[[], FlaskClient], failures: int) -> None:
        super().__init__(clients)
        self.failures = failures

    def post(self, path: str, json: Any = None) -> ApiResponse:
        if path.endswith("/commit"):
            with self.lock:
                refuse, self.failures = self.failures > 0, self.failures - 1
            if refuse:
                raise UpstreamUnavailable("the frames API could not be reached")
        return super().post(path, json)


def test_a_commit_the_frames_api_could_not_take_is_retried_while_the_lease_holds_and_no_frame_runs_twice(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    driver.frames_api = CommitsUnreachable(frames.client, failures=3)
    register(client, playbook("frame", 50, 1))
    detail = driver.run("tests/cursor_frame_50_1")
    assert detail["status"] == "completed", detail["error"]
    assert _sql(driver, "SELECT count(*), count(DISTINCT patient) FROM cursor_out") == [(230, 230)]
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    assert [e["payload"]["attempt"] for e in frames.events(stage_id, "frame.committed")] == [1, 1, 1, 1, 1]
    assert not frames.events(stage_id, "frame.abandoned")
    assert driver.frames_api.posts["commit"] == 5  # the refused attempts never reached it
