"""A long execution's projection is stored in pages (replay/pages.py, migration 0015): a fold at the tip
of a loop writes the last pages, not the whole commands surface, and the pages are the fold of the log."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.projector.service import Projector
from noetl_cloud.replay.pages import PAGE_ROWS, page_count
from tests.integration.control_fixtures import register
from tests.integration.distributed_driver import ENDED, Driver
from tests.integration.replay_fixtures import last_event

ITERATIONS = 150
LOOP = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop, path: pages/loop}}
workflow:
  - step: each
    loop:
      spec: {{mode: sequential}}
      in: "{{{{ range({ITERATIONS}) | list }}}}"
      iterator: i
    tool: {{kind: noop, result: "{{{{ iter.i }}}}"}}
"""


def _pages(plane: ControlPlane, eid: str) -> dict[int, tuple[int, int, str]]:
    """The commands surface's pages: page -> (rows, version written at, checksum column)."""
    with plane.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT page, jsonb_array_length(state), version, encode(checksum, 'hex') FROM projection "
                "WHERE execution_id = :e AND projection_type = 'commands' ORDER BY page"
            ),
            {"e": int(eid)},
        ).all()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _store_in_one_row(plane: ControlPlane, eid: str, *, lose: str | None = None) -> None:
    """Every command of the execution in page 0, as a projection written before migration 0015 stores
    it (at the version it had); ``lose``: a kind whose rows go too."""
    with plane.engine.begin() as conn:
        conn.execute(
            text(
                "WITH whole AS (SELECT jsonb_agg(r ORDER BY r ->> 'id') AS rows FROM projection, "
                "jsonb_array_elements(state) r WHERE execution_id = :e AND projection_type = 'commands') "
                "UPDATE projection SET state = (SELECT rows FROM whole) "
                "WHERE execution_id = :e AND projection_type = 'commands' AND page = 0"
            ),
            {"e": int(eid)},
        )
        conn.execute(
            text(
                "DELETE FROM projection WHERE execution_id = :e "
                "AND ((projection_type = 'commands' AND page > 0) OR projection_type = :lose)"
            ),
            {"e": int(eid), "lose": lose},
        )


def _loop(client: FlaskClient, plane: ControlPlane) -> tuple[Driver, str]:
    """The loop playbook registered and started: its driver and execution id."""
    register(client, LOOP)
    driver = Driver(client, plane.engine)
    return driver, driver.start("pages/loop")


def _verify(client: FlaskClient, eid: str) -> dict[str, Any]:
    answer = client.get(
        "/api/replay/verify", query_string={"tenant_id": "acme", "organization_id": "ops", "execution_id": eid}
    )
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()  # type: ignore[no-any-return]


def test_a_fold_at_the_tip_of_a_long_loop_writes_its_last_pages_and_the_pages_are_the_fold_of_the_log(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    driver, eid = _loop(rclient, rplane)
    projector = projector_role.projector
    written_late: list[int] = []
    while driver.status(eid)["status"] not in ENDED:
        (command,) = driver.issued(eid)
        driver.run_one(command)
        result = projector.handle(last_event(rplane, eid))
        assert result.outcome == "applied", result
        with rplane.engine.connect() as conn:
            version = conn.execute(
                text("SELECT version FROM projection_tracking WHERE execution_id = :e"), {"e": int(eid)}
            ).scalar_one()
        pages = _pages(rplane, eid)
        if len(pages) > 2:  # past the first pages: a fold writes the last one or two, whatever came before
            written_late.append(sum(1 for _rows, at, _sum in pages.values() if at == version))
    assert driver.status(eid)["status"] == "completed"
    pages = _pages(rplane, eid)
    commands = sum(rows for rows, _at, _sum in pages.values())
    assert commands >= ITERATIONS and len(pages) == page_count(commands)
    assert all(rows == PAGE_ROWS for page, (rows, _at, _sum) in pages.items() if page < len(pages) - 1)
    assert written_late and max(written_late) <= 2, written_late
    *earlier, last = pages.values()
    assert all(checksum == "" for _rows, _at, checksum in earlier) and len(last[2]) == 64  # the surface's
    report = _verify(rclient, eid)  # the live pages' checksums are those of a fresh fold of every event
    assert report["ok"] and report["events_behind"] == 0, report


def test_a_surface_stored_in_one_row_before_pages_is_rewritten_in_pages_at_its_next_fold(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    driver, eid = _loop(rclient, rplane)
    projector = Projector(projector_role.engine, projector_role.registry, cache_rows=0)  # reads what is stored
    for _ in range(100):  # part of the loop, folded in one go
        (command,) = driver.issued(eid)
        driver.run_one(command)
    assert projector.handle(last_event(rplane, eid)).outcome == "applied"
    _store_in_one_row(rplane, eid)  # as migration 0015 leaves a projection written before it
    (whole,) = _pages(rplane, eid).values()
    assert whole[0] > PAGE_ROWS  # one page 0 holding every command so far
    driver.run_to_end(eid)
    assert projector.handle(last_event(rplane, eid)).outcome == "applied"
    pages = _pages(rplane, eid)
    assert len(pages) == page_count(sum(rows for rows, _at, _sum in pages.values())) > 1
    report = _verify(rclient, eid)
    assert report["ok"], report


def test_a_refold_at_the_same_version_rewrites_the_pages_of_a_surface_stored_before_pages(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    driver, eid = _loop(rclient, rplane)
    projector = Projector(projector_role.engine, projector_role.registry, cache_rows=0)
    driver.run_to_end(eid)
    assert projector.handle(last_event(rplane, eid)).outcome == "applied"
    _store_in_one_row(rplane, eid, lose="stages")  # and a row lost
    rebuilt = projector.project("acme", "ops", eid)  # a row missing: refolded from the first event, same version
    assert rebuilt.refolded
    pages = _pages(rplane, eid)
    assert [rows for rows, _at, _sum in pages.values()][:-1] == [PAGE_ROWS] * (len(pages) - 1)
    report = _verify(rclient, eid)
    assert report["ok"], report
