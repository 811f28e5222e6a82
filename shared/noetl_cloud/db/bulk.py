"""Multi-row statements in chunks: pg8000 takes at most 32,767 bind parameters per statement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Table
from sqlalchemy.dialects.postgresql import insert as pg_insert

T = TypeVar("T")
CHUNK_ROWS = 400  # x at most ~25 columns keeps a statement well under the parameter limit


def chunks(rows: Sequence[T], size: int = CHUNK_ROWS) -> Iterator[Sequence[T]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """INSERT ``rows`` with as few multi-row statements as the parameter limit allows."""
    for chunk in chunks(rows):
        conn.execute(pg_insert(table).values(list(chunk)))
