"""``kind: postgres`` without a server: task validation, credentials, SQLSTATE mapping, JSON-safe values."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pg8000.dbapi
import pytest
from sqlalchemy import exc

from noetl_cloud.engine import ToolCall
from noetl_cloud.tools.postgres import PostgresTool, _db_failure, _TaskError, credential_url, jsonable

KEYCHAIN = {"pg": {"kind": "postgres", "dsn": "postgresql://u:p@127.0.0.1:9/db"}}


def call(config: dict[str, Any], keychain: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(
        kind="postgres",
        config=config,
        spec={},
        execution_id="1",
        step="s",
        task="t",
        attempt=1,
        keychain=KEYCHAIN if keychain is None else keychain,
    )


def test_sql_is_not_rendered_as_a_template() -> None:
    assert PostgresTool.raw_fields == ("command", "query")


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"auth": "pg"}, "bad_task"),
        ({"auth": "pg", "command": "SELECT 1", "query": "SELECT 1"}, "bad_task"),
        ({"auth": "pg", "query": "  "}, "bad_task"),
        ({"auth": "pg", "query": "SELECT :a", "params": ["a"]}, "bad_task"),
        ({"query": "SELECT 1"}, "bad_task"),
        ({"auth": "missing", "query": "SELECT 1"}, "unknown_credential"),
    ],
)
def test_a_malformed_task_is_an_error_outcome_before_any_connection(config: dict[str, Any], kind: str) -> None:
    tool = PostgresTool()
    outcome = tool.run(call(config))
    assert outcome.status == "error" and outcome.error is not None and outcome.error["kind"] == kind
    assert outcome.to_dict()["pg"] == {"code": None, "sqlstate": None}
    assert tool.pools() == 0


def test_credential_from_a_dsn_pins_pg8000() -> None:
    url = credential_url({"a": {"name": "a", "kind": "postgres", "dsn": "postgres://u:p@h:5/d"}}, "a")
    assert url == "postgresql+pg8000://u:p@h:5/d"


def test_credential_from_fields_escapes_the_password() -> None:
    entry = {
        "kind": "postgres_credential",
        "host": "h",
        "port": "5433",
        "user": "u",
        "password": "p@ss/w:rd",
        "database": "d",
    }
    assert credential_url({"a": entry}, "a") == "postgresql+pg8000://u:p%40ss%2Fw%3Ard@h:5433/d"


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "http_bearer", "dsn": "postgresql://u@h/d"},
        {"kind": "postgres", "host": "h"},
        {"kind": "postgres", "dsn": "mysql://u:secret@h/d"},
        {"kind": "postgres", "host": "h", "user": "u", "database": "d", "port": "x"},
    ],
)
def test_a_bad_credential_is_refused_without_echoing_it(entry: dict[str, Any]) -> None:
    with pytest.raises(_TaskError) as info:
        credential_url({"a": entry}, "a")
    assert info.value.kind == "bad_credential" and "secret" not in info.value.message


def _dbapi_error(fields: Any) -> exc.DBAPIError:
    return exc.DBAPIError("SELECT 1", {}, pg8000.dbapi.ProgrammingError(fields))


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        ("23505", "integrity_violation"),
        ("40001", "transaction_rollback"),
        ("40P01", "transaction_rollback"),
        ("42P01", "syntax_error_or_access_rule_violation"),
        ("57014", "timeout"),
        ("28P01", "invalid_authorization"),
        ("ZZ999", "database_error"),
    ],
)
def test_sqlstate_goes_to_outcome_pg_and_names_the_error_kind(sqlstate: str, kind: str) -> None:
    outcome = _db_failure(_dbapi_error({"S": "ERROR", "C": sqlstate, "M": "boom", "D": "Key (id)=(1)"}))
    assert outcome.status == "error"
    assert outcome.to_dict()["pg"] == {"code": sqlstate, "sqlstate": sqlstate}
    assert outcome.error == {"kind": kind, "message": "boom", "sqlstate": sqlstate, "detail": "Key (id)=(1)"}


def test_a_connection_failure_reports_08001() -> None:
    outcome = _db_failure(_dbapi_error("Can't create a connection to host 127.0.0.1 and port 9"))
    assert outcome.error is not None and outcome.error["kind"] == "connection"
    assert outcome.extra["pg"] == {"code": "08001", "sqlstate": "08001"}


def test_connection_refused_is_an_error_outcome_and_the_pool_is_kept() -> None:
    tool = PostgresTool()
    try:
        outcome = tool.run(call({"auth": "pg", "query": "SELECT 1"}))
        assert outcome.status == "error" and outcome.error is not None and outcome.error["kind"] == "connection"
        assert "p@" not in outcome.error["message"]
        assert outcome.error["target"] == {"postgres_auth": "pg"}  # what a subscription's downstreams match
        tool.run(call({"auth": "pg", "query": "SELECT 2"}))
        assert tool.pools() == 1
    finally:
        tool.close()
    assert tool.pools() == 0


def test_column_values_become_json_safe() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ident = uuid.UUID(int=1)
    row = {
        "t": when,
        "d": dt.date(2024, 1, 2),
        "n": Decimal("1.50"),
        "u": ident,
        "b": b"\x01\xff",
        "i": dt.timedelta(minutes=1),
        "j": {"a": [Decimal("2"), None]},
        "o": object,
    }
    assert jsonable(row) == {
        "t": "2024-01-02T03:04:05+00:00",
        "d": "2024-01-02",
        "n": "1.50",
        "u": str(ident),
        "b": "\\x01ff",
        "i": 60.0,
        "j": {"a": ["2", None]},
        "o": str(object),
    }
