"""Frame bounds (issue #23 item 8): a frame stops taking rows at ``max_bytes`` or ``max_seconds`` and
commits what it took; the rows it did not take go back to the cursor through ``cursor.release`` and a
later frame takes them: every row processed once, none lost, none twice. Real PostgreSQL and the frames
API in process (the cursor-loop driver of test_cursor_loops.py); time is a clock the test moves."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.engine import FakeClock
from noetl_cloud.engine.outcome import Outcome, ToolCall
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.payload import load_rows
from tests.integration.control_fixtures import register
from tests.integration.frame_fixtures import Frames
from tests.integration.frame_fixtures import frames as frames
from tests.integration.test_cursor_loops import CLAIM, CursorDriver, _indent, _sql
from tests.integration.test_cursor_loops import driver as driver

RELEASE = (
    "UPDATE cursor_queue SET frame_id = NULL WHERE frame_id = CAST(:frame_id AS bigint) AND id IN "
    "(SELECT CAST(r->>'id' AS int) FROM jsonb_array_elements(CAST(:rows AS jsonb)) r)"
)
LARGEST_ROW = len(json.dumps({"id": 230, "patient": "p230"}, separators=(",", ":")))


def playbook(name: str, process: str, frame: str, *, release: bool = True) -> str:
    task = (
        "INSERT INTO cursor_out (patient, frame_id) SELECT p->>'patient', CAST(:fid AS bigint) "
        "FROM jsonb_array_elements(CAST(:rows AS jsonb)) p"
        if process == "frame"
        else "INSERT INTO cursor_out (patient, frame_id) VALUES (:patient, CAST(:fid AS bigint))"
    )
    params = (
        '{rows: "{{ frame.rows }}", fid: "{{ frame.id }}"}'
        if process == "frame"
        else '{patient: "{{ iter.patient.patient }}", fid: "{{ iter.frame.id }}"}'
    )
    release_sql = f'        release: "{RELEASE}"\n' if release else ""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}, path: tests/{name}}}
workload: {{facility: f1}}
workflow:
  - step: fetch
    loop:
      iterator: patient
      cursor:
        kind: postgres
        auth: pg
        claim: |
{_indent(CLAIM, 10)}
{release_sql}        params: {{frame_id: "{{{{ __frame_id }}}}", facility: "{{{{ workload.facility }}}}"}}
      spec:
        mode: cursor
        max_in_flight: 2
        frame: {{max_rows: 50, process: {process}, lease_seconds: 60, heartbeat_seconds: 20, {frame}}}
    tool:
      - save:
          kind: postgres
          auth: pg
          command: "{task}"
          params: {params}
"""


def assert_every_row_once(driver: CursorDriver) -> None:
    saved = Counter(r[0] for r in _sql(driver, "SELECT patient FROM cursor_out"))
    assert set(saved) == {f"p{i}" for i in range(1, 231)}  # none lost
    assert set(saved.values()) == {1}  # none twice
    assert _sql(driver, "SELECT count(*) FROM cursor_queue WHERE facility = 'f1' AND frame_id IS NULL") == [(0,)]


def test_a_frame_stops_at_max_bytes_commits_its_rows_and_the_rest_goes_to_the_next_frame(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    register(client, playbook("bytes_frame", "frame", "max_bytes: 1024"))
    detail = driver.run("tests/bytes_frame")
    assert detail["status"] == "completed", detail["error"]
    assert_every_row_once(driver)
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    committed = frames.events(stage_id, "frame.committed")
    counts = [e["payload"]["row_count"] for e in committed]
    assert sum(counts) == 230 and max(counts) < 50  # no frame took the 50 rows it could claim
    cut = 0
    for event in committed:
        payload = event["payload"]
        rows = load_rows(driver.payloads, payload["output_ref"]["rows_ref"]) if payload["row_count"] else []
        size = sum(len(json.dumps(r, separators=(",", ":"))) for r in rows)
        assert len(rows) == payload["row_count"] and size <= 1024  # the commit carries the rows it took
        metrics = payload["output_ref"]["metrics"]
        if metrics.get("bound"):
            cut += 1
            assert metrics["bound"] == "max_bytes" and size + LARGEST_ROW > 1024  # it stopped at the bound
            assert metrics["released"] == 50 - payload["row_count"]
    assert cut >= 4
    # Each frame saved exactly the rows its commit counts: a released row was saved by a later frame only.
    saved = {str(f): n for f, n in _sql(driver, "SELECT frame_id, count(*) FROM cursor_out GROUP BY 1")}
    assert saved == {e["aggregate_id"]: e["payload"]["row_count"] for e in committed if e["payload"]["row_count"]}


class Ticking:
    """Tools whose row task moves the slots' clock one second, and that clock (no sleep anywhere)."""

    def __init__(self, tools: Any) -> None:
        self.tools = tools
        self.clock = FakeClock()

    def get(self, kind: str) -> Any:
        tool = self.tools.get(kind)
        clock = self.clock

        class Timed:
            raw_fields = tool.raw_fields

            def run(self, call: ToolCall) -> Outcome:
                outcome: Outcome = tool.run(call)
                if call.task == "save":
                    clock.current += 1.0
                return outcome

        return Timed()


def test_a_row_mode_frame_stops_at_max_seconds_on_its_clock_and_the_rest_goes_to_the_next_frame(
    driver: CursorDriver, client: FlaskClient, frames: Frames
) -> None:
    ticking = Ticking(driver.tools)
    driver.tools = ticking
    driver.clock = lambda: ticking.clock
    register(client, playbook("seconds_frame", "row", "max_seconds: 2.5"))
    detail = driver.run("tests/seconds_frame")
    assert detail["status"] == "completed", detail["error"]
    stage_id = str(_sql(driver, "SELECT stage_id FROM stage")[0][0])
    committed = frames.events(stage_id, "frame.committed")
    assert_every_row_once(driver)
    counts = [e["payload"]["row_count"] for e in committed]
    # Rows 1, 2, 3 start at 0, 1, 2 s; the 4th would start at 3 s >= 2.5 s: three rows a frame.
    assert sum(counts) == 230 and set(counts) <= {0, 2, 3} and counts.count(3) >= 70
    bounded = [e["payload"]["output_ref"]["metrics"] for e in committed if e["payload"]["row_count"] == 3]
    assert all(m["bound"] == "max_seconds" and m["released"] == 47 for m in bounded[:60])
    assert driver.frames_api.posts["commit"] == len(committed)


def test_without_release_a_frame_bound_is_refused(client: FlaskClient) -> None:
    from noetl_cloud.spec import parse_document

    document = playbook("unbounded", "frame", "max_bytes: 1024", release=False)
    with pytest.raises(ValidationFailed) as info:
        from noetl_cloud.engine.model import compile_playbook

        compile_playbook(parse_document(document))  # type: ignore[arg-type]
    assert "cursor.release" in str(info.value.to_dict())
    answer = client.post("/api/catalog", data=document, content_type="application/yaml")
    assert answer.status_code == 422 and "cursor.release" in json.dumps(answer.get_json())


def test_the_release_statement_frees_exactly_the_rows_it_names(driver: CursorDriver) -> None:
    # The release statement of the playbooks above, alone: it frees exactly the rows named.
    with driver.plane.engine.begin() as conn:
        conn.execute(text("UPDATE cursor_queue SET frame_id = 7 WHERE id <= 5"))
        conn.execute(text(RELEASE), {"frame_id": "7", "rows": json.dumps([{"id": 4}, {"id": 5}])})
    assert _sql(driver, "SELECT id FROM cursor_queue WHERE frame_id = 7 ORDER BY id") == [(1,), (2,), (3,)]
