"""Bulk inserts as one JSON parameter, expanded by the server with ``jsonb_to_recordset``.

A multi-row ``INSERT ... VALUES`` of a few hundred rows costs the client more than the server:
SQLAlchemy compiles a statement with one bind parameter per cell (thousands), and pg8000 rewrites
that statement's parameter style character by character; pg8000 also caps a statement at 32,767
parameters. Sending the rows as one JSON array instead keeps the statement small, constant and
cached, whatever the number of rows:

    INSERT INTO t (a, b) SELECT a, b FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(a bigint, b text)

Columns are typed from the table definition; datetimes travel as ISO 8601 text, JSONB columns as
nested JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, CursorResult, Table, text
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@lru_cache(maxsize=128)
def _statement(table: Table, columns: tuple[str, ...], suffix: str) -> Any:
    names = ", ".join(f'"{c}"' for c in columns)
    types = ", ".join(f'"{c}" {table.c[c].type.compile(dialect=_DIALECT)}' for c in columns)
    return text(
        f'INSERT INTO "{table.name}" ({names}) '
        f"SELECT {names} FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({types}) {suffix}"
    )


def insert_rows(
    conn: Connection, table: Table, rows: Sequence[dict[str, Any]], *, suffix: str = ""
) -> CursorResult[Any] | None:
    """INSERT ``rows`` (all with the same keys) in one statement.

    ``suffix`` is appended verbatim (``ON CONFLICT ...``, ``RETURNING ...``); it must be a constant
    of the caller's code, never data.
    """
    if not rows:
        return None
    statement = _statement(table, tuple(rows[0]), suffix)
    return conn.execute(statement, {"rows": json.dumps(rows, default=_default, separators=(",", ":"))})
