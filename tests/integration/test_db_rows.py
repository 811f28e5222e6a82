"""Text statements named once (db/rows.py): the same rows as plain text, read by name, with SQLAlchemy's
result metadata built once per statement instead of on every execution."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from noetl_cloud.db.rows import RowsStatement, named_text

SQL = (
    "SELECT CAST(:n AS int) AS n, 'x' || CAST(:n AS text) AS label, now() IS NOT NULL AS ok, CAST(NULL AS jsonb) AS doc"
)


def test_a_rows_statement_answers_like_plain_text_and_names_its_columns_after_the_first_run(db_engine: Any) -> None:
    engine: Engine = db_engine
    statement = RowsStatement(SQL)
    with engine.connect() as conn:
        plain = [conn.execute(text(SQL), {"n": n}).one() for n in range(3)]
        assert statement._named is None
        named = [statement(conn, {"n": n}).one() for n in range(3)]
    assert statement._named is not None  # named from the first run's result
    assert [tuple(r) for r in named] == [tuple(r) for r in plain]
    assert [(r.n, r.label, r.ok, r.doc) for r in named] == [(n, f"x{n}", True, None) for n in range(3)]


def test_a_named_statement_keeps_the_metadata_of_its_first_execution(db_engine: Any) -> None:
    engine: Engine = db_engine
    named = named_text(SQL, ["n", "label", "ok", "doc"])
    plain = text(SQL)
    with engine.connect() as conn:
        first, second = (conn.execute(named, {"n": n}) for n in (1, 2))
        assert second.one().label == "x2" and first.one().label == "x1"
        # SQLAlchemy built the named statement's result metadata once; plain text builds it every time.
        assert first._metadata._keymap is second._metadata._keymap
        a, b = (conn.execute(plain, {"n": n}) for n in (1, 2))
        assert a._metadata._keymap is not b._metadata._keymap
        a.close()
        b.close()


def test_a_statement_without_rows_is_run_as_plain_text(db_engine: Any) -> None:
    engine: Engine = db_engine
    statement = RowsStatement("CREATE TEMPORARY TABLE scratch (n int)")
    with engine.connect() as conn:
        result = statement(conn)
        assert not result.returns_rows and statement._named is None
