"""What one execute writes, counted in the database, and the figure bench/execute.py states for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.eventlog.relay import OutboxRelay
from tests.integration.control_fixtures import Topics, register

BENCH = Path(__file__).resolve().parents[2] / "bench" / "execute.py"
#: The bench's own playbook: one noop step.
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench, path: bench/noop}
workflow:
  - step: start
    tool: {kind: noop}
"""
TABLES = ("execution", "stream", "event", "command", "outbox")


def counts(plane: ControlPlane) -> dict[str, int]:
    with plane.engine.connect() as conn:
        return {table: int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()) for table in TABLES}


def test_one_execute_writes_the_rows_the_bench_and_the_docs_say(
    client: FlaskClient, plane: ControlPlane, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(client, PLAYBOOK)
    # The outbox rows are deleted once published: count them before any publish (nothing handed off).
    monkeypatch.setattr(OutboxRelay, "hand_off", lambda _relay, _rows: None)
    before = counts(plane)
    started = client.post("/api/execute", json={"path": "bench/noop"})
    assert started.status_code == 202, started.get_json()
    execution_id = int(started.get_json()["execution_id"])
    after = counts(plane)
    written = {table: after[table] - before[table] for table in TABLES}
    assert written == {"execution": 1, "stream": 1, "event": 3, "command": 1, "outbox": 2}
    with plane.engine.connect() as conn:
        types = conn.execute(
            text("SELECT event_type FROM event WHERE execution_id = :e ORDER BY position"), {"e": execution_id}
        )
        outbox = conn.execute(
            text("SELECT o.topic FROM outbox o JOIN event e ON e.event_id = o.event_id WHERE e.execution_id = :e"),
            {"e": execution_id},
        )
        assert types.scalars().all() == ["playbook.started", "step.started", "command.issued"]
        mirror, notification = sorted(outbox.scalars().all(), key=lambda topic: "commands" in topic)
    assert mirror.endswith("-events") and "-commands-" in notification  # two messages to publish

    docstring = " ".join(BENCH.read_text().split('"""')[1].split())
    assert "writes eight rows (execution, stream head, three events, command," in docstring
    assert "the command notification's outbox row and one events-mirror row) and publishes two messages" in docstring
    architecture = " ".join((BENCH.parents[1] / "docs" / "architecture.md").read_text().split())
    assert re.search(
        r"A start writes eight rows: the execution, the stream head, three events, the command", architecture
    )
