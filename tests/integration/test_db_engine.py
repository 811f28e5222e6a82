from __future__ import annotations

import socket

import pytest
from sqlalchemy import Connection, Engine, text

from noetl_cloud.settings import Settings


def test_every_pooled_connection_has_tcp_nodelay(db_engine: Engine) -> None:
    with db_engine.connect() as a, db_engine.connect() as b:
        for conn in (a, b):
            raw = conn.connection.dbapi_connection
            assert raw._usock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert conn.execute(text("SELECT 1")).scalar_one() == 1


def _prepared(conn: Connection) -> list[str]:
    return list(conn.execute(text("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")).scalars())


def test_a_statement_with_parameters_is_prepared_once_per_connection_and_run_by_name(db_engine: Engine) -> None:
    query = text("SELECT CAST(:n AS int) * 2 AS twice, CAST(:s AS text) AS s")
    with db_engine.connect() as conn:
        answers = [conn.execute(query, {"n": n, "s": f"v{n}"}).one() for n in range(5)]
        assert [(a.twice, a.s) for a in answers] == [(2 * n, f"v{n}") for n in range(5)]
        server_side = [s for s in _prepared(conn) if "* 2 AS twice" in s]
        assert len(server_side) == 1  # prepared by the first run, reused by the four others
        cache = conn.connection.dbapi_connection._noetl_statements
        assert len([key for key in cache if "* 2 AS twice" in key[0]]) == 1


def test_prepared_statements_are_bounded_per_connection(db_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl_cloud.db import engine as engine_module

    monkeypatch.setattr(engine_module, "PREPARED_PER_CONNECTION", 3)
    with db_engine.connect() as conn:
        for n in range(6):  # six distinct statements
            assert conn.execute(text(f"SELECT CAST(:v AS int) + {n}"), {"v": 1}).scalar_one() == 1 + n
        kept = [s for s in _prepared(conn) if "AS int) +" in s]
        assert [s.rsplit("+ ", 1)[1] for s in kept] == ["3", "4", "5"]  # the least recently used were closed
        assert len(conn.connection.dbapi_connection._noetl_statements) == 3


def test_a_prepared_statement_follows_the_table_it_reads_through_ddl_and_commits_are_durable(
    db_engine: Engine,
) -> None:
    with db_engine.begin() as conn:
        conn.execute(text("CREATE TABLE prep_probe (id int PRIMARY KEY, v text)"))
    read = text("SELECT v FROM prep_probe WHERE id = :id")
    with db_engine.begin() as conn:
        conn.execute(text("INSERT INTO prep_probe (id, v) VALUES (:id, :v)"), {"id": 1, "v": "one"})
        assert conn.execute(read, {"id": 1}).scalar_one() == "one"
    with db_engine.begin() as conn:  # the table is rebuilt under the prepared statements
        conn.execute(text("DROP TABLE prep_probe"))
        conn.execute(text("CREATE TABLE prep_probe (id int PRIMARY KEY, extra int, v text)"))
        conn.execute(text("INSERT INTO prep_probe (id, extra, v) VALUES (:id, 0, :v)"), {"id": 1, "v": "uno"})
    with db_engine.connect() as other:  # what the transactions committed is visible to another session
        assert other.execute(read, {"id": 1}).scalar_one() == "uno"


def test_prepared_statements_can_be_turned_off(db_settings: Settings) -> None:
    from noetl_cloud.db.engine import create_db_engine

    engine = create_db_engine(db_settings.model_copy(update={"db_prepared_statements": False}))
    try:
        with engine.connect() as conn:
            for n in range(3):
                assert conn.execute(text("SELECT CAST(:n AS int) + 40"), {"n": n}).scalar_one() == 40 + n
            assert not hasattr(conn.connection.dbapi_connection, "_noetl_statements")
            assert [s for s in _prepared(conn) if "+ 40" in s] == []
    finally:
        engine.dispose()


def test_a_write_after_an_idle_ping_commits_by_itself_and_the_ping_leaves_no_transaction(db_settings: Settings) -> None:
    from noetl_cloud.db.engine import create_db_engine, one_statement, ping_when_idle

    engine = create_db_engine(db_settings, pool_size=1)
    ping_when_idle(engine, idle_s=0)  # every checkout after a checkin pings the connection first
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE pinged (v int)"))
        with one_statement(engine) as conn:  # checked out idle: pinged, then the one statement
            conn.execute(text("INSERT INTO pinged VALUES (1)"))
            assert not conn.connection.dbapi_connection._in_transaction  # type: ignore[union-attr]
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM pinged")).scalar_one() == 1  # committed
    finally:
        engine.dispose()


def test_timestamptz_values_read_as_pg8000_reads_them_in_every_form_the_server_sends(db_engine: Engine) -> None:
    import pg8000.converters

    from noetl_cloud.db import engine as engine_module

    values = (
        "2026-11-27 08:12:16.378367+00",
        "2026-11-27 08:12:16+00",
        "1999-01-08 04:05:06.5+05:30",
        "2026-02-28 23:59:59.999999-08",
    )
    with db_engine.connect() as conn:
        assert conn.connection.dbapi_connection.pg_types[1184] is engine_module._timestamptz_in  # not strptime
        conn.execute(text("SET TIME ZONE 'Asia/Kolkata'"))  # offsets other than +00 come back too
        for value in values:
            read = conn.execute(
                text("SELECT CAST(:v AS timestamptz) AS at, CAST(CAST(:v AS timestamptz) AS text)"), {"v": value}
            ).one()
            assert read.at == pg8000.converters.timestamptz_in(read[1])  # the driver's own reading
            assert read.at.utcoffset() is not None
        infinite = conn.execute(text("SELECT CAST('infinity' AS timestamptz)")).scalar_one()
        assert infinite == "infinity"  # what pg8000 itself answers for a value past datetime's range
        conn.execute(text("RESET TIME ZONE"))
