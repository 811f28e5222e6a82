"""The database side of ``bench/scale.py``: a fresh migrated database, table sizes on disk, and the
bulk seeding of executions cloned from a template execution (``INSERT ... SELECT ... generate_series``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text

import execute  # bench/execute.py
from noetl_cloud.envelope import utc_now
from noetl_cloud.eventlog.keys import KEY_DIGEST_SQL
from noetl_cloud.eventlog.stored import KEY_TEXT_SQL
from noetl_cloud.local.process import wait_until
from noetl_cloud.retention.partitions import first_id

DB = "bench_scale"

TABLES = (
    "event",
    "event_key",
    "outbox",
    "stream",
    "execution",
    "command",
    "loop_run",
    "projection",
    "projection_tracking",
    "projection_snapshot",
    "stage",
    "frame",
)
# (table, id column the clone renumbers or None, columns rewritten with the new execution id)
CLONED = (
    ("execution", "execution_id", ()),
    ("stream", None, ("stream_id",)),
    ("event", "event_id", ("stream_id", "aggregate_id", "idempotency_key")),
    ("command", "command_id", ()),
    ("projection", None, ()),
    ("projection_tracking", None, ()),
)


def fresh_database(base_url: str, name: str = DB) -> str:
    return execute.fresh_database(base_url, name)


def table_bytes(engine: Engine) -> dict[str, int]:
    """On-disk bytes of each table with its partitions, indexes and TOAST."""
    sizes = {}
    with engine.connect() as conn:
        for table in TABLES:
            sizes[table] = int(
                conn.execute(
                    text(
                        "SELECT pg_total_relation_size(CAST(:t AS regclass)) + coalesce((SELECT "
                        "sum(pg_total_relation_size(inhrelid)) FROM pg_inherits "
                        "WHERE inhparent = CAST(:t AS regclass)), 0)"
                    ),
                    {"t": table},
                ).scalar_one()
            )
    return sizes


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def seed(engine: Engine, template: str, first: int, count: int, chunk: int = 20_000) -> None:
    """Clone the template execution's rows ``count`` times (executions ``first .. first+count-1``)."""
    now = utc_now()
    bases = {
        "execution": first_id(now - timedelta(minutes=50)),
        "event": first_id(now - timedelta(minutes=60)),
        "command": first_id(now - timedelta(minutes=40)),
    }
    with engine.connect() as conn:
        columns = {
            table: [
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
                        "AND is_identity = 'NO' ORDER BY ordinal_position"
                    ),
                    {"t": table},
                )
            ]
            for table, _id, _cols in CLONED
        }
        sizes = {
            table: int(conn.execute(text(f"SELECT count(*) FROM tpl_{table}")).scalar_one()) for table, *_ in CLONED
        }
    for start in range(first, first + count, chunk):
        stop = min(first + count, start + chunk) - 1
        with engine.begin() as conn:
            for table, id_column, rewritten in CLONED:
                values = []
                for column in columns[table]:
                    if column == "execution_id":
                        values.append(f"{bases['execution']} + g")
                    elif column == id_column:
                        values.append(f"{bases[table]} + g * {sizes[table]} + t.rn")
                    elif column in rewritten:
                        values.append(f"replace(t.{column}, '{template}', ({bases['execution']} + g)::text)")
                    else:
                        values.append(f"t.{column}")
                order = f"ORDER BY {id_column}" if id_column else ""
                if table == "event":  # its idempotency keys, as an append writes them (their digests)
                    key = KEY_DIGEST_SQL.format(  # the key's text, of the clone's execution
                        k=KEY_TEXT_SQL.format(
                            k=f"replace(t.idempotency_key, '{template}', ({bases['execution']} + g)::text)",
                            t="t.tenant_id",
                            o="t.organization_id",
                            x=f"({bases['execution']} + g)",
                        ),
                        x=f"({bases['execution']} + g)",
                    )
                    conn.execute(
                        text(
                            f"INSERT INTO event_key (key_digest, event_id) SELECT {key}, "
                            f"{bases['event']} + g * {sizes['event']} + t.rn "
                            "FROM (SELECT *, row_number() OVER (ORDER BY event_id) - 1 AS rn FROM tpl_event) t, "
                            f"generate_series({start}, {stop}) g WHERE t.idempotency_key IS NOT NULL "
                            "ON CONFLICT DO NOTHING"
                        )
                    )
                conn.execute(
                    text(
                        f"INSERT INTO {table} ({', '.join(columns[table])}) SELECT {', '.join(values)} "
                        f"FROM (SELECT *, row_number() OVER ({order}) - 1 AS rn FROM tpl_{table}) t, "
                        f"generate_series({start}, {stop}) g"
                    )
                )
    settle(engine)


def settle(engine: Engine) -> None:
    """Let the database finish what a bulk load leaves it (vacuum and analyze of the grown tables, the
    checkpoint), so that work does not land inside the next measurement: tables in service grow
    gradually, with autovacuum keeping up."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        try:
            conn.execute(text("CHECKPOINT"))
        except Exception as exc:  # noqa: BLE001 - needs pg_checkpoint; a figure, not a failure
            print(f"  note: no CHECKPOINT ({type(exc).__name__})")


def wait_folded(engine: Engine, ids: list[str], timeout: float) -> None:
    """Until the projection of each of ``ids`` has folded every event of its execution (a note if not)."""
    folded = (
        "SELECT count(*) FROM projection_tracking t WHERE execution_id = ANY(CAST(:ids AS bigint[])) "
        "AND version = (SELECT count(*) FROM event e WHERE e.execution_id = t.execution_id)"
    )
    listed = "{" + ",".join(ids) + "}"
    if not wait_until(lambda: scalar(engine, folded, ids=listed) == len(ids), timeout=timeout, interval=0.5):
        print(f"  note: {len(ids) - scalar(engine, folded, ids=listed)} projections still behind after {timeout:.0f} s")
