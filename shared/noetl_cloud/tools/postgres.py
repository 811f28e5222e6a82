"""``kind: postgres``: one SQL statement against PostgreSQL, with named binds, in its own transaction.

Task fields:

* ``auth``: the keychain alias of the credential. :attr:`ToolCall.keychain` maps the alias to an entry,
  either ``{kind: postgres, dsn: postgresql://...}`` or ``{kind: postgres, host, port, user, password,
  database}`` (``kind`` may be omitted, or ``postgres_credential`` as in the spec's examples).
* ``command`` (DML/DDL) or ``query`` (SELECT): the SQL text, sent as written. It is **not** a template
  (both are :attr:`PostgresTool.raw_fields`); values travel as binds only.
* ``params``: a mapping of named binds (``:name`` in the SQL). A list or mapping value is bound as JSON
  text, to be read with ``CAST(:name AS jsonb)`` (``jsonb_array_elements``, ``jsonb_to_recordset``).
  A literal colon followed by a word in the SQL must be escaped as ``\\:`` (SQLAlchemy ``text()``).

One statement per task: with binds PostgreSQL refuses several statements (SQLSTATE 42601).
``spec.timeout`` (seconds) sets ``statement_timeout`` for the task's transaction (exceeding it is 57014,
error kind ``timeout``).

The result is ``{rows, row_count, columns}``: ``rows`` a list of dicts (values made JSON-safe: timestamps
as ISO 8601, numerics and UUIDs as text, bytea as ``\\x..`` hex), ``row_count`` the number of rows
returned or affected (0 when the statement reports neither), ``columns`` the column names.
``outcome.pg`` always holds ``{code, sqlstate}``: ``00000`` on success, the server's SQLSTATE on a
database error, ``08001`` when no connection could be made, ``None`` when the task itself is malformed.
The error kind names the SQLSTATE class (``integrity_violation``, ``transaction_rollback``, ...). A
database error names its target, ``error.target = {postgres_auth: <the task's auth alias>}``: a
subscription's declared ``downstreams`` match it (``noetl_cloud.spool.downstreams``).

Large row sets need nothing here: the engine moves any result above its threshold to the payload store
and events carry the reference (dsl-v2-spec §10, data-plane architecture §4).

Each tool instance keeps one SQLAlchemy engine (a connection pool on pg8000, ``TCP_NODELAY`` on every
connection) per DSN, created on first use; the process's registry holds one instance. :meth:`close`
disposes the pools.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, TextClause, event, exc, text
from sqlalchemy.engine import URL

from noetl_cloud.db.engine import normalize_url, set_tcp_nodelay
from noetl_cloud.db.tls import split_tls, tls_engine
from noetl_cloud.engine.outcome import Outcome, ToolCall
from noetl_cloud.errors import ConfigError

CREDENTIAL_KINDS = (None, "postgres", "postgres_credential")
OK_SQLSTATE = "00000"
#: What JDBC and the SQL standard report when the client cannot establish a connection.
CONNECT_SQLSTATE = "08001"

#: Error kind by SQLSTATE class (PostgreSQL manual, appendix A).
SQLSTATE_CLASSES = {
    "08": "connection",
    "0A": "feature_not_supported",
    "21": "cardinality_violation",
    "22": "data_exception",
    "23": "integrity_violation",
    "25": "invalid_transaction_state",
    "28": "invalid_authorization",
    "3D": "invalid_catalog",
    "3F": "invalid_schema",
    "40": "transaction_rollback",
    "42": "syntax_error_or_access_rule_violation",
    "53": "insufficient_resources",
    "54": "program_limit_exceeded",
    "55": "object_not_in_prerequisite_state",
    "57": "operator_intervention",
    "58": "system_error",
    "P0": "plpgsql_error",
    "XX": "internal_error",
}
SQLSTATE_KINDS = {"57014": "timeout"}


class _TaskError(Exception):
    """The task cannot run as written (no SQL, unknown alias, bad params); never retried by the tool."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class PostgresTool:
    """Runs ``command``/``query`` with ``params`` on the credential named by ``auth``."""

    kind = "postgres"
    raw_fields: tuple[str, ...] = ("command", "query")

    def __init__(self, *, pool_size: int = 5, max_overflow: int = 5, pool_timeout: float = 30.0) -> None:
        self.pool_options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout,
            "pool_pre_ping": True,
            "pool_recycle": 1800,
        }
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def run(self, call: ToolCall) -> Outcome:
        """Run the task's one statement in a transaction and map rows or the SQLSTATE to an outcome."""
        try:
            sql, params = _statement_of(call.config)
            url = credential_url(call.keychain, call.config.get("auth"))
        except _TaskError as failure:
            return Outcome.fail(failure.kind, failure.message, pg={"code": None, "sqlstate": None})
        timeout = call.spec.get("timeout")
        try:
            with self.engine(url).begin() as conn:
                if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
                    conn.execute(_SET_TIMEOUT, {"ms": str(int(timeout * 1000))})
                cursor = conn.execute(_text(sql), params)
                if cursor.returns_rows:
                    columns = list(cursor.keys())
                    rows = [{name: jsonable(value) for name, value in zip(columns, row, strict=True)} for row in cursor]
                    count = len(rows)
                else:
                    columns, rows = [], []
                    count = max(cursor.rowcount, 0)
        except exc.DBAPIError as error:
            failed = _db_failure(error)
            auth = call.config.get("auth")
            target = {"postgres_auth": auth if isinstance(auth, str) else None}
            return Outcome("error", None, {**(failed.error or {}), "target": target}, failed.meta, failed.extra)
        except exc.StatementError as error:  # raised before the server saw it: a bind without a value
            message = str(error.orig) if error.orig is not None else type(error).__name__
            return Outcome.fail("bad_task", message, pg={"code": None, "sqlstate": None})
        result = {"rows": rows, "row_count": count, "columns": columns}
        return Outcome.ok(result, pg={"code": OK_SQLSTATE, "sqlstate": OK_SQLSTATE})

    def engine(self, url: str) -> Engine:
        """The pooled engine of ``url``, created on first use."""
        with self._lock:
            engine = self._engines.get(url)
            if engine is None:
                engine = tls_engine(url, **self.pool_options)
                event.listen(engine, "connect", lambda conn, _record: set_tcp_nodelay(conn))
                self._engines[url] = engine
            return engine

    def pools(self) -> int:
        """How many DSNs this instance holds a pool for."""
        return len(self._engines)

    def close(self) -> None:
        """Dispose every pool (their connections close)."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()


_SET_TIMEOUT = text("SELECT set_config('statement_timeout', :ms, true)")


@lru_cache(maxsize=256)
def _text(sql: str) -> TextClause:
    return text(sql)


def _statement_of(config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    command, query = config.get("command"), config.get("query")
    if (command is None) == (query is None):
        raise _TaskError("bad_task", "a postgres task needs exactly one of `command` or `query`")
    sql = command if command is not None else query
    if not isinstance(sql, str) or not sql.strip():
        raise _TaskError("bad_task", "the postgres `command`/`query` must be non-empty text")
    params = config.get("params") or {}
    if not isinstance(params, Mapping) or not all(isinstance(key, str) for key in params):
        raise _TaskError("bad_task", "postgres `params` must be a mapping of bind names to values")
    return sql, {key: _bind(value) for key, value in params.items()}


def _bind(value: Any) -> Any:
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str, separators=(",", ":"))
    return value


def credential_url(keychain: Mapping[str, Any], alias: Any) -> str:
    """The pg8000 SQLAlchemy URL of the keychain entry ``alias``; :class:`_TaskError` if it has none."""
    if not isinstance(alias, str) or not alias:
        raise _TaskError("bad_task", "a postgres task needs `auth`: the keychain alias of its credential")
    entry = keychain.get(alias)
    if not isinstance(entry, Mapping):
        raise _TaskError("unknown_credential", f"no keychain entry '{alias}'")
    if entry.get("kind") not in CREDENTIAL_KINDS:
        raise _TaskError("bad_credential", f"keychain entry '{alias}' is a {entry.get('kind')}, not a postgres one")
    try:
        if entry.get("dsn"):
            dsn = str(entry["dsn"])
            if dsn.startswith("postgres://"):  # libpq's short scheme; SQLAlchemy 2 knows only postgresql
                dsn = "postgresql://" + dsn.removeprefix("postgres://")
            normalized = normalize_url(dsn)
            split_tls(normalized)  # an sslmode libpq does not know is the entry's fault
            return normalized
        missing = [key for key in ("host", "user", "database") if not entry.get(key)]
        if missing:
            raise _TaskError("bad_credential", f"keychain entry '{alias}' needs `dsn` or {', '.join(missing)}")
        port = entry.get("port")
        url = URL.create(
            "postgresql+pg8000",
            username=str(entry["user"]),
            password=None if entry.get("password") is None else str(entry["password"]),
            host=str(entry["host"]),
            port=int(port) if port not in (None, "") else None,
            database=str(entry["database"]),
            query={"sslmode": str(entry["sslmode"])} if entry.get("sslmode") else {},
        )
        split_tls(url)
    except (ConfigError, exc.ArgumentError, TypeError, ValueError):
        # Never echo the entry: it holds the password.
        raise _TaskError("bad_credential", f"keychain entry '{alias}' is not a valid PostgreSQL address") from None
    return url.render_as_string(hide_password=False)


def _db_failure(error: exc.DBAPIError) -> Outcome:
    fields = error.orig.args[0] if error.orig is not None and error.orig.args else None
    if isinstance(fields, Mapping) and fields.get("C"):
        sqlstate = str(fields["C"])
        kind = SQLSTATE_KINDS.get(sqlstate) or SQLSTATE_CLASSES.get(sqlstate[:2], "database_error")
        body = {"kind": kind, "message": str(fields.get("M", "")), "sqlstate": sqlstate}
        if fields.get("D"):
            body["detail"] = str(fields["D"])
        return Outcome("error", None, body, {}, {"pg": {"code": sqlstate, "sqlstate": sqlstate}})
    # No server answer: pg8000 could not connect (or lost the connection).
    message = str(fields) if isinstance(fields, str) else type(error.orig).__name__
    return Outcome.fail("connection", message, pg={"code": CONNECT_SQLSTATE, "sqlstate": CONNECT_SQLSTATE})


def jsonable(value: Any) -> Any:
    """A column value as JSON can carry it (the result goes into events and templates)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return str(value)
