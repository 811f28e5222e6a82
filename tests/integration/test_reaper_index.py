"""The reaper's maintenance reads are driven by indexes: re-notify reads a partial index of unended
commands (``ix_command_issued_stale``, migration 0009, or ``ix_command_open``) and visits only those
rows, however many ended commands the table holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from noetl_cloud.control.reaper import _RENOTIFY
from noetl_cloud.db.engine import CUSTOM_PLANS, create_db_engine
from noetl_cloud.settings import Settings

ENDED, ISSUED, STALE = 20_000, 40, 15


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_db_engine(Settings(database_url=database_url, environment="test"), pool_size=1)
    yield engine
    engine.dispose()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_renotify_reads_the_partial_index_of_issued_commands_and_visits_only_them(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO execution (execution_id, tenant_id, organization_id, path, status, execution_pool) "
                "VALUES (1, 'acme', 'ops', 'reaper/index', 'running', 'shared')"
            )
        )
        # Many ended commands, a few issued ones: STALE of them last touched long ago, the rest just now.
        conn.execute(
            text(
                "INSERT INTO command (command_id, execution_id, tenant_id, organization_id, step, execution_pool, "
                "status, issued_event_id, updated_at) "
                "SELECT n, 1, 'acme', 'ops', 's', 'shared', "
                "CASE WHEN n <= :issued THEN 'issued' ELSE 'completed' END, n, "
                "CASE WHEN n <= :stale OR n > :issued THEN now() - interval '1 hour' ELSE now() END "
                "FROM generate_series(1, :total) AS n"
            ),
            {"issued": ISSUED, "stale": STALE, "total": ISSUED + ENDED},
        )
        conn.execute(text("ANALYZE command"))
    params = {"t": "acme", "o": "ops", "after_s": 60, "limit": 200, "pattern": "noetl-commands-%"}
    conn = engine.connect()
    try:
        with conn.begin() as transaction:  # the UPDATE runs under EXPLAIN ANALYZE: rolled back
            conn.execute(CUSTOM_PLANS)  # as Reaper.renotify runs it
            plan = conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + str(_RENOTIFY)), params).scalar_one()
            transaction.rollback()
    finally:
        conn.close()
    document = plan if isinstance(plan, list) else json.loads(plan)
    scans = [n for n in _nodes(document[0]["Plan"]) if n.get("Relation Name") == "command" and "Scan" in n["Node Type"]]
    # Either partial index of unended commands serves it (ix_command_open, migration 0008, when the planner
    # finds it smaller); none of the ended commands is visited, however many there are.
    partial = [n for n in scans if n.get("Index Name") in ("ix_command_issued_stale", "ix_command_open")]
    assert partial, [(n["Node Type"], n.get("Index Name")) for n in scans]
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"]
    visited = sum(
        (int(n["Actual Rows"]) + int(n.get("Rows Removed by Filter", 0))) * n["Actual Loops"] for n in partial
    )
    assert STALE <= visited <= ISSUED  # the issued commands at most, and none of the ended ones
