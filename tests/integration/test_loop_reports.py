"""A distributed loop's reports on PostgreSQL: what a report reads and writes does not grow with the
number of iterations the loop has run (issue #26), and the loop still ends with every result in order."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import event, text

from noetl_cloud.control.bootstrap import ControlPlane
from tests.integration.control_fixtures import Topics, register
from tests.integration.distributed_driver import ENDED, Driver

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop, path: {path}}}
workflow:
  - step: start
    loop: {{in: "{{{{ workload.items }}}}", iterator: it, mode: {mode}}}
    tool: {{kind: noop, result: "{{{{ iter.it }}}}"}}
"""


@pytest.fixture
def driver(client: FlaskClient, plane: ControlPlane, topics: Topics) -> Iterator[Driver]:
    yield Driver(client, plane.engine)


class Statements:
    """The statements a block of code sends, with the size of their parameters."""

    def __init__(self, plane: ControlPlane) -> None:
        self.engine = plane.engine
        self.sent: list[tuple[str, int]] = []

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_rest: Any) -> None:
        self.sent.append((statement.split("(")[0][:60], len(repr(parameters))))

    def __enter__(self) -> Statements:
        event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)


def _run_loop(driver: Driver, client: FlaskClient, plane: ControlPlane, mode: str, n: int) -> tuple[str, list[Any]]:
    """Run a loop of ``n`` elements one report at a time; the statements of each report."""
    register(client, LOOP.format(path=f"loops/{mode}", mode=mode))
    eid = driver.start(f"loops/{mode}", {"items": [f"item-{i:04d}" for i in range(n)]})
    per_report = []
    while driver.status(eid)["status"] not in ENDED:
        pending = driver.issued(eid)
        with Statements(plane) as seen:
            driver.run_one(pending[0])
        per_report.append(seen.sent)
    return eid, per_report


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_late_iteration_report_sends_what_an_early_one_sends(
    mode: str, driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    eid, reports = _run_loop(driver, client, plane, mode, 60)
    early, late = reports[5], reports[55]  # neither the first nor the last: the loop neither starts nor ends
    assert [s for s, _ in late] == [s for s, _ in early]
    # The same bytes but for the longer numbers (iteration 55 against 5): rewriting the results kept so
    # far would add 50 of them, over 700 bytes.
    assert abs(sum(size for _, size in late) - sum(size for _, size in early)) <= 64
    detail = driver.status(eid)
    assert detail["status"] == "completed"
    assert detail["results"]["start"] == [f"item-{i:04d}" for i in range(60)]


def test_the_loop_row_keeps_no_results_and_ends_with_its_counters_done(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    eid, _ = _run_loop(driver, client, plane, "sequential", 12)
    with plane.engine.connect() as conn:
        row = conn.execute(
            text("SELECT results, next_index, in_flight FROM loop_run WHERE execution_id = :id"), {"id": int(eid)}
        ).one()
    assert (row.results, row.next_index, row.in_flight) == ({}, 12, 0)
    assert driver.status(eid)["results"]["start"][-1] == "item-0011"


def test_a_failed_sequential_iteration_ends_the_loop_with_the_results_before_it(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(
        client,
        """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: failing, path: loops/failing}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: it, mode: sequential}
    tool:
      kind: python
      code: |
        def main(it):
            if it == 3:
                raise ValueError("three")
            return it * 10
      args: {it: "{{ iter.it }}"}
""",
    )
    eid = driver.start("loops/failing", {"items": [0, 1, 2, 3, 4]})
    detail = driver.run_to_end(eid)
    assert detail["status"] == "failed"
    assert detail["error"]["error"]["iteration"] == 3
    assert detail["results"]["start"] == [0, 10, 20]  # iteration 4 never ran


def test_the_open_commands_count_reads_the_partial_index(plane: ControlPlane) -> None:
    with plane.engine.connect() as conn:
        plan = conn.execute(
            text(
                "EXPLAIN SELECT count(*) FROM command o WHERE o.execution_id = 1 "
                "AND o.status IN ('issued', 'claimed', 'started')"
            )
        ).scalars()
        assert "ix_command_open" in "\n".join(plan)


def test_a_large_workload_is_read_once_and_handed_back_only_to_a_worker_without_it(
    driver: Driver, client: FlaskClient, plane: ControlPlane
) -> None:
    register(client, LOOP.format(path="loops/large", mode="sequential"))
    items = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(300)]  # ~20 kB: the control plane keeps it
    eid = driver.start("loops/large", {"items": items})
    first = driver.claim(driver.issued(eid)[0]).get_json()
    assert first["scope"]["workload"] == {"items": items}

    def report(command: dict[str, Any], **extra: Any) -> dict[str, Any]:
        body = {"command_id": command["command_id"], "worker_id": driver.worker_id, "attempt": 1, "status": "ok"}
        answer = client.post("/api/events", json={**body, "result": command["iteration"]["item"], **extra})
        assert answer.status_code == 200, answer.get_json()
        return answer.get_json()["next"][0]  # type: ignore[no-any-return]

    with Statements(plane) as seen:
        second = report(first, accept_next=True)
    assert second["scope"]["workload"] == {"items": items}  # the worker did not say it holds it
    assert int(eid) in plane.orchestrator.workloads.known()  # read once; from now on the lock reads NULL
    assert not any("SELECT workload FROM execution" in s for s, _ in seen.sent)
    third = report(second, accept_next=True, has_workload=True)
    assert "workload" not in third["scope"] and third["iteration"]["item"] == items[2]
    plane.orchestrator.workloads = type(plane.orchestrator.workloads)()  # another process: nothing held
    fourth = report(third, accept_next=True, has_workload=True)
    assert fourth["iteration"]["item"] == items[3]
    while fourth is not None:
        answer = client.post(
            "/api/events",
            json={
                "command_id": fourth["command_id"],
                "worker_id": driver.worker_id,
                "attempt": 1,
                "status": "ok",
                "result": fourth["iteration"]["item"],
                "accept_next": True,
                "has_workload": True,
            },
        ).get_json()
        fourth = (answer["next"] or [None])[0]
    assert driver.status(eid)["results"]["start"] == items
