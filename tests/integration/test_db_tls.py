"""libpq's sslmode on pg8000 engines, against the local stack's PostgreSQL (which has no TLS)."""

from __future__ import annotations

import ssl
from typing import Any

import pg8000
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import DBAPIError

from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.tls import tls_engine
from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings
from noetl_cloud.tools.postgres import _TaskError, credential_url


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _contexts_asked(engine: Engine) -> list[Any]:
    """The ``ssl_context`` each connection attempt that reaches SQLAlchemy's own connect carries."""
    seen: list[Any] = []

    @event.listens_for(engine, "do_connect")
    def _record(_dialect: Any, _rec: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        seen.append(cparams.get("ssl_context"))

    return seen


def test_a_url_with_sslmode_disable_connects_over_plain_tcp(database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=_with_query(database_url, "sslmode=disable")))
    asked = _contexts_asked(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1
        assert not isinstance(conn.connection.dbapi_connection._usock, ssl.SSLSocket)
    engine.dispose()
    assert asked == [False]


def test_without_sslmode_only_the_first_connection_asks_a_server_that_refuses_tls(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls_asks: list[object] = []
    plain_connect = pg8000.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl_context") is not False:
            tls_asks.append(kwargs.get("ssl_context"))
        return plain_connect(*args, **kwargs)

    monkeypatch.setattr(pg8000, "connect", connect)
    engine = tls_engine(database_url.replace("postgresql://", "postgresql+pg8000://"), pool_size=1, max_overflow=0)
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
            assert not isinstance(conn.connection.dbapi_connection._usock, ssl.SSLSocket)
            conn.invalidate()  # the next checkout opens a new connection
    engine.dispose()
    assert len(tls_asks) == 1  # the first connection asked, was refused, and went plain
    assert isinstance(tls_asks[0], ssl.SSLContext)


def test_sslmode_require_refuses_a_server_without_tls(database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=_with_query(database_url, "sslmode=require")))
    with pytest.raises(DBAPIError, match="refuses SSL"):
        with engine.connect():
            pass
    engine.dispose()


def test_an_unknown_sslmode_is_a_configuration_error(database_url: str) -> None:
    with pytest.raises(ConfigError, match="sslmode 'sometimes'") as raised:
        create_db_engine(Settings(database_url=_with_query(database_url, "sslmode=sometimes")))
    assert raised.value.code == "config_invalid"


def test_a_postgres_credential_takes_sslmode_from_its_dsn_or_its_field(database_url: str) -> None:
    url = credential_url({"pg": {"kind": "postgres", "dsn": _with_query(database_url, "sslmode=disable")}}, "pg")
    assert "sslmode=disable" in url
    with pytest.raises(_TaskError) as raised:
        credential_url({"pg": {"dsn": _with_query(database_url, "sslmode=maybe")}}, "pg")
    assert raised.value.kind == "bad_credential"
    fields = {"host": "127.0.0.1", "user": "u", "database": "d", "sslmode": "verify-full"}
    assert "sslmode=verify-full" in credential_url({"pg": fields}, "pg")
