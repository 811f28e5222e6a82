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
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, CursorResult, Table, text
from sqlalchemy.dialects import postgresql

from noetl_cloud.db.rows import named_text

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def as_bytea(hex_digits: str) -> str:
    """Hex digits as the text form of their bytes: what a ``bytea`` column of an inserted row takes (the
    rows travel as JSON, so bytes go as text)."""
    return "\\x" + hex_digits


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
    return conn.execute(statement, {"rows": _rows_json(rows)})


def _rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(rows, default=_default, separators=(",", ":"))


class Part:
    """One INSERT of an :class:`InsertBatch`; after the batch ran, ``returned`` holds its RETURNING rows."""

    def __init__(
        self,
        table: Table,
        rows: Sequence[dict[str, Any]],
        suffix: str,
        returning: tuple[str, ...],
        only_with: tuple[Part, str] | None,
        unless_null: str | None = None,
    ) -> None:
        self.table = table
        self.rows = rows
        self.suffix = suffix
        self.returning = returning
        self.only_with = only_with
        self.unless_null = unless_null
        self.returned: list[list[Any]] = []


_Depends = tuple[int, str, str | None]
_Shape = tuple[Table, tuple[str, ...], str, tuple[str, ...], _Depends | None]


class InsertBatch:
    """Many tables' inserts of one transaction as one statement: one round trip, not one per table.

    Each part is an ``INSERT ... SELECT ... FROM jsonb_to_recordset(...)`` in a data-modifying CTE;
    PostgreSQL runs every part to completion, all on one snapshot, and checks foreign keys at the end
    of the statement, so a part may reference rows another part inserts. An optional ``guard`` (a SQL
    boolean of the caller's code) is evaluated once, first: when it is false no part inserts anything
    and :meth:`execute` answers false, so the caller can refresh what it assumed and try again. A
    :meth:`precondition` (an ``UPDATE`` that must change a row) joins the guard and then covers the
    statements too. Checks registered with :meth:`after` run once the statement has, in order (they
    raise on a conflict, and the caller's transaction is rolled back).
    """

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.statements: list[tuple[str, dict[str, Any]]] = []
        self.condition: tuple[str, dict[str, Any]] | None = None
        self._after: list[Callable[[], None]] = []

    def statement(self, sql: str, params: dict[str, Any]) -> None:
        """Add an ``UPDATE``/``DELETE`` (a constant of the caller's code, named binds) to the statement,
        run in a CTE of its own. Not with a ``guard``: the guard covers only the inserts. With a
        :meth:`precondition` it must end with its ``WHERE`` clause, which the precondition joins."""
        self.statements.append((sql, params))

    def precondition(self, sql: str, params: dict[str, Any]) -> None:
        """An ``UPDATE ... WHERE ...`` or an ``INSERT ... ON CONFLICT ... DO UPDATE ... WHERE ...`` (a
        constant of the caller's code, named binds, no ``RETURNING``) that must change at least one row
        for anything of the batch to be written: it runs first, and when it changes nothing, no part
        inserts and no statement changes anything, and :meth:`execute` answers false (an optimistic
        check, e.g. of a version read earlier in the transaction, or a key claimed with the rows)."""
        assert self.condition is None, "one precondition per batch"
        self.condition = (sql, params)

    def insert(
        self,
        table: Table,
        rows: Sequence[dict[str, Any]],
        *,
        suffix: str = "",
        returning: tuple[str, ...] = (),
        only_with: tuple[Part, str] | None = None,
        unless_null: str | None = None,
    ) -> Part:
        """Add an insert of ``rows`` (all with the same keys); ``suffix`` (``ON CONFLICT ...``) is a
        constant of the caller's code, never data. An empty ``rows`` adds nothing.

        ``only_with=(part, column)``: insert only the rows whose ``column`` the earlier ``part`` returned
        (so the outbox rows of events an ``ON CONFLICT DO NOTHING`` skipped are skipped too).
        ``unless_null``: a column whose null lets a row in regardless of ``only_with`` (an event without
        an idempotency key does not wait for a key row).
        """
        part = Part(table, rows, suffix, returning, only_with, unless_null)
        if rows:
            self.parts.append(part)
        return part

    def after(self, check: Callable[[], None]) -> None:
        """Run ``check`` after the statement (it reads the parts' ``returned``)."""
        self._after.append(check)

    def execute(self, conn: Connection, *, guard: str = "TRUE", params: dict[str, Any] | None = None) -> bool:
        """Run every part in one statement; false (and nothing written) when ``guard`` was false."""
        assert guard == "TRUE" or not self.statements, "a guarded batch holds inserts only"
        if self.parts or self.statements or self.condition is not None:
            shape = tuple(self._shape(p) for p in self.parts)
            values = {f"r{i}": _rows_json(p.rows) for i, p in enumerate(self.parts)}
            for i, (_sql, given) in enumerate(self.statements):
                values.update({f"s{i}_{name}": value for name, value in given.items()})
            sqls = tuple(sql for sql, _params in self.statements)
            condition = None
            if self.condition is not None:
                condition = self.condition[0]
                values.update({f"p_{name}": value for name, value in self.condition[1].items()})
            statement = _batch_statement(shape, sqls, guard, condition)
            row = conn.execute(statement, {**values, **(params or {})}).one()
            if not row[0]:
                return False
            for part, returned in zip(self.parts, row[1:], strict=True):
                part.returned = returned or []
        elif guard != "TRUE" and not conn.execute(text(f"SELECT {guard}"), params or {}).scalar():
            return False
        for check in self._after:
            check()
        return True

    def _shape(self, part: Part) -> _Shape:
        depends = None
        if part.only_with is not None:
            if part.only_with[0] not in self.parts and part.unless_null is not None:
                return (part.table, tuple(part.rows[0]), part.suffix, part.returning, None)  # every row passes
            depends = (self.parts.index(part.only_with[0]), part.only_with[1], part.unless_null)
        return (part.table, tuple(part.rows[0]), part.suffix, part.returning, depends)


_BIND = re.compile(r"(?<![:\w]):(\w+)")


@lru_cache(maxsize=256)
def _batch_statement(
    shape: tuple[_Shape, ...], statements: tuple[str, ...], guard: str, condition: str | None = None
) -> Any:
    if condition is None:
        ctes = [f"g AS (SELECT ({guard}) AS ok)"]
    else:
        renamed = _BIND.sub(":p_" + r"\1", condition)
        ctes = [
            f"p AS ({renamed} RETURNING 1)",
            f"g AS (SELECT (({guard}) AND EXISTS (SELECT 1 FROM p)) AS ok)",
        ]
    for i, sql in enumerate(statements):
        renamed = _BIND.sub(f":s{i}_" + r"\1", sql)
        if condition is not None:  # each statement ends with its WHERE clause (InsertBatch.statement)
            renamed += " AND (SELECT ok FROM g)"
        ctes.append(f"s{i} AS ({renamed})")
    outputs = ["(SELECT ok FROM g) AS ok"]
    for i, (table, columns, suffix, returning, depends) in enumerate(shape):
        names = ", ".join(f'"{c}"' for c in columns)
        types = ", ".join(f'"{c}" {table.c[c].type.compile(dialect=_DIALECT)}' for c in columns)
        condition = "(SELECT ok FROM g)"
        if depends is not None:
            member = f'r."{depends[1]}" IN (SELECT "{depends[1]}" FROM w{depends[0]})'
            if depends[2] is not None:
                member = f'(r."{depends[2]}" IS NULL OR {member})'
            condition += f" AND {member}"
        back = ", ".join(f'"{c}"' for c in returning) if returning else "1"
        ctes.append(
            f'w{i} AS (INSERT INTO "{table.name}" ({names}) '
            f"SELECT {names} FROM jsonb_to_recordset(CAST(:r{i} AS jsonb)) AS r({types}) "
            f"WHERE {condition} {suffix} RETURNING {back})"
        )
        if returning:
            row = ", ".join(f'w{i}."{c}"' for c in returning)
            outputs.append(f"(SELECT jsonb_agg(jsonb_build_array({row})) FROM w{i}) AS w{i}")
        else:
            outputs.append(f"NULL AS w{i}")
    named = ["ok", *(f"w{i}" for i in range(len(shape)))]
    return named_text(f"WITH {', '.join(ctes)} SELECT {', '.join(outputs)}", named)
