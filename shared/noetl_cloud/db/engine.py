"""SQLAlchemy engine factory on pg8000.

Locally the engine connects with a plain DSN (``NOETL_DATABASE_URL``); in Google Cloud, when
``NOETL_CLOUDSQL_INSTANCE`` is set, it connects through the Cloud SQL Python Connector (TLS,
optional IAM database authentication). The pool is small: Cloud Run scales by instances, and
each instance should hold only a few connections.

A URL's libpq ``sslmode`` is honoured, and TLS contexts are built once per process (see
:mod:`noetl_cloud.db.tls`).

pg8000 does not set ``TCP_NODELAY``; with Nagle's algorithm on, a statement of a few KB waits for
the server's delayed ACK (~40 ms) before its last segment leaves. Every new connection sets it.

pg8000 runs a statement with parameters as an unnamed statement in three round trips (parse, then
describe, then bind and execute), parsing it again every time; :func:`prepare_statements` keeps
named server-side statements per connection instead, so a statement seen before costs one round
trip (``NOETL_DB_PREPARED_STATEMENTS``, on by default).

No ping on every checkout: SQLAlchemy's ``pool_pre_ping`` costs a round trip per request, a third
of a hot request's. :func:`ping_when_idle` pings only a connection that sat in the pool longer than
``IDLE_PING_S`` (where a restarted server or a dropped NAT entry would have killed it); a busy
connection is used as it is, and one that died under load fails its statement: SQLAlchemy then
invalidates the pool's older connections, and the roles answer 503 (``database_unavailable``) so
the caller retries.
"""

from __future__ import annotations

import socket
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

from pg8000 import converters as pg8000_converters
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError

from noetl_cloud.db.tls import tls_engine
from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings


def set_tcp_nodelay(dbapi_connection: Any) -> None:
    """Turn Nagle's algorithm off on a pg8000 connection's socket."""
    sock = getattr(dbapi_connection, "_usock", None)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _timestamptz_in(text: str) -> Any:
    """A ``timestamptz`` as PostgreSQL sends it (``2026-11-27 08:12:16.378367+00``), parsed by the C
    ``datetime.fromisoformat``; pg8000's own converter (``strptime``, about 15 % of the projector's CPU
    on reading events) for what that refuses (``infinity``, years past 9999)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return pg8000_converters.timestamptz_in(text)


def fast_timestamps(dbapi_connection: Any) -> None:
    """Parse a pg8000 connection's ``timestamptz`` values with :func:`_timestamptz_in`."""
    dbapi_connection.register_in_adapter(pg8000_converters.TIMESTAMPTZ, _timestamptz_in)


class _Names(dict[str, Any]):
    """Stands in for a parameter mapping: every key reads back as its own name."""

    def __getitem__(self, key: str) -> str:
        return key


def cache_paramstyle_conversion() -> None:
    """Memoize pg8000's SQL parameter-style rewrite (idempotent).

    pg8000 rewrites every statement's placeholders with a per-character scan in Python on every
    execute; measured here it was the largest client cost of a request (about a third of a
    millisecond per statement). Its result depends only on the style and the SQL text - the
    values are then picked from the arguments by the placeholder names - so the rewrite is
    computed once per distinct statement and the values are picked per call, as pg8000 does.
    """
    import pg8000.legacy

    original = pg8000.legacy.convert_paramstyle
    if getattr(original, "_noetl_cached", False):
        return

    @lru_cache(maxsize=4096)
    def rewrite(style: str, query: str) -> tuple[str, tuple[str, ...] | None]:
        statement, names = original(style, query, _Names())
        return statement, names if isinstance(names, tuple) else None

    def convert(style: str, query: str, args: Any) -> tuple[str, Any]:
        statement, names = rewrite(style, query)
        if names is None:
            return statement, args
        return statement, tuple(args[name] for name in names)

    convert._noetl_cached = True  # type: ignore[attr-defined]
    pg8000.legacy.convert_paramstyle = convert


PREPARED_PER_CONNECTION = 256


def prepare_statements() -> None:
    """Run pg8000's parameterized statements as named prepared statements, cached per connection
    (idempotent; only connections that :func:`enable_prepared_statements` marked use the cache).

    The cache maps the statement text (after the parameter-style rewrite) and its parameter type
    oids to the server-side statement: its name, result columns and converters. It is an LRU of
    :data:`PREPARED_PER_CONNECTION` statements; an evicted one is closed on the server. The server
    itself re-plans a prepared statement after DDL on the tables it reads, so migrations need
    nothing. Statements without parameters (pg8000 sends ``COMMIT`` and ``ROLLBACK`` this way) go by
    the simple query protocol, one round trip; ``COPY`` streams keep pg8000's own path.
    """
    import pg8000.core

    original = pg8000.core.CoreConnection.execute_unnamed
    if getattr(original, "_noetl_prepared", False):
        return

    def execute_unnamed(self: Any, statement: str, vals: Any = (), oids: Any = (), stream: Any = None) -> Any:
        cache: OrderedDict[tuple[str, tuple[int, ...]], Any] | None = getattr(self, "_noetl_statements", None)
        if cache is None or stream is not None:
            return original(self, statement, vals=vals, oids=oids, stream=stream)
        if not vals:  # COMMIT, ROLLBACK: the simple protocol's one round trip, not three
            return self.execute_simple(statement)
        key = (statement, tuple(oids))
        prepared = cache.get(key)
        if prepared is None:
            prepared = self.prepare_statement(statement, oids)
            cache[key] = prepared
            if len(cache) > PREPARED_PER_CONNECTION:
                self.close_prepared_statement(cache.popitem(last=False)[1][0])
        else:
            cache.move_to_end(key)
        name, columns, input_funcs = prepared
        params = pg8000.core.make_params(self.py_types, vals)
        return self.execute_named(name, params, columns, input_funcs, statement)

    execute_unnamed._noetl_prepared = True  # type: ignore[attr-defined]
    pg8000.core.CoreConnection.execute_unnamed = execute_unnamed  # type: ignore[method-assign]


def enable_prepared_statements(dbapi_connection: Any, plan_cache_mode: str = "force_custom_plan") -> None:
    """Give a new pg8000 connection its cache of prepared statements (see :func:`prepare_statements`),
    with the session's ``plan_cache_mode``.

    ``force_custom_plan`` (the default) plans every execution afresh: a prepared statement's generic
    plan is made from the table sizes of its moment, and an ``UPDATE outbox ... WHERE outbox_id =
    ANY(...)`` first run on a nearly empty table kept a sequential scan while the table grew to
    250,000 rows (23 ms a call instead of 0.2). ``auto`` reuses a generic plan once it costs no more
    than the custom ones (PostgreSQL plans again when the tables' statistics change): the execute
    role's write statements plan nothing that depends on the data, and planning them every time was
    0.6 ms of server CPU per started execution; its data-dependent statements (the outbox marks and
    sweeps) ask for custom plans with ``SET LOCAL`` (:data:`CUSTOM_PLANS`).
    """
    cursor = dbapi_connection.cursor()
    cursor.execute(f"SET plan_cache_mode = {PLAN_CACHE_MODES[plan_cache_mode]}")
    cursor.close()
    dbapi_connection.commit()  # a SET inside the transaction pg8000 opened would go with its rollback
    dbapi_connection._noetl_statements = OrderedDict()


IDLE_PING_S = 10.0
PLAN_CACHE_MODES = {m: m for m in ("auto", "force_custom_plan", "force_generic_plan")}
#: For a transaction whose statements' best plans depend on the data (run it first, in the transaction).
CUSTOM_PLANS = text("SET LOCAL plan_cache_mode = force_custom_plan")


def ping_when_idle(engine: Engine, idle_s: float = IDLE_PING_S) -> None:
    """Ping a pooled connection at checkout only when it has been idle more than ``idle_s`` seconds;
    a dead one is replaced (the pool retries the checkout on :class:`DisconnectionError`)."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["noetl_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("noetl_idle_since")
        if since is None or time.monotonic() - since < idle_s:
            return
        autocommit = dbapi_connection.autocommit
        try:
            dbapi_connection.autocommit = True  # the ping leaves no transaction open behind it
            cursor = dbapi_connection.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
        except Exception as exc:  # any failure of a ping means the connection is gone
            raise DisconnectionError("an idle pooled connection was dead") from exc
        finally:
            dbapi_connection.autocommit = autocommit


@contextmanager
def one_statement(engine: Engine) -> Iterator[Connection]:
    """A connection for a writer whose whole transaction is one statement: it runs with the driver's
    autocommit on, so PostgreSQL makes the statement its own transaction and the client sends no
    ``BEGIN`` and no ``COMMIT`` (two round trips fewer: measured on pg8000, about 70 us of client and
    55 us of backend CPU per transaction). Only for one statement: two would commit one by one."""
    with engine.connect() as conn:
        dbapi_connection = conn.connection.dbapi_connection
        assert dbapi_connection is not None
        dbapi_connection.rollback()  # a transaction left open (none, normally: then no round trip) is ended
        dbapi_connection.autocommit = True
        try:
            yield conn
        finally:
            dbapi_connection.autocommit = False


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` DSNs and pin the pg8000 driver."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigError(
            "NOETL_DATABASE_URL must be a PostgreSQL URL",
            code="config_invalid",
            details={"variable": "NOETL_DATABASE_URL"},
        )
    return parsed.set(drivername="postgresql+pg8000").render_as_string(hide_password=False)


def create_db_engine(settings: Settings, *, plan_cache_mode: str = "force_custom_plan", **overrides: Any) -> Engine:
    """Build the engine the settings describe (nothing connects until first use); ``plan_cache_mode``
    as :func:`enable_prepared_statements` takes it."""
    options: dict[str, Any] = {
        "pool_size": settings.db_pool_size,
        "max_overflow": settings.db_max_overflow,
        "pool_timeout": settings.db_pool_timeout_s,
        "pool_pre_ping": False,  # see ping_when_idle
        "pool_recycle": 1800,
    }
    options.update(overrides)
    cache_paramstyle_conversion()
    if settings.cloudsql_instance:
        engine = _cloudsql_engine(settings, options)
    else:
        settings.require("database_url")
        assert settings.database_url is not None
        engine = tls_engine(normalize_url(settings.database_url), **options)
    event.listen(engine, "connect", lambda conn, _record: set_tcp_nodelay(conn))
    event.listen(engine, "connect", lambda conn, _record: fast_timestamps(conn))
    ping_when_idle(engine)
    if settings.db_prepared_statements:
        prepare_statements()
        event.listen(engine, "connect", lambda conn, _record: enable_prepared_statements(conn, plan_cache_mode))
    return engine


def _cloudsql_engine(settings: Settings, options: dict[str, Any]) -> Engine:
    settings.require("db_user")
    if not settings.db_iam_auth:
        settings.require("db_password")
    # Imported here: only Cloud SQL deployments pay for the connector.
    from google.cloud.sql.connector import Connector, IPTypes

    connector = Connector(refresh_strategy="lazy")
    ip_type = IPTypes[settings.cloudsql_ip_type.upper()]
    password = settings.db_password.get_secret_value() if settings.db_password else None
    instance = str(settings.cloudsql_instance)

    def connect() -> Any:
        return connector.connect(
            instance,
            "pg8000",
            user=settings.db_user,
            password=password,
            db=settings.db_name,
            enable_iam_auth=settings.db_iam_auth,
            ip_type=ip_type,
        )

    return create_engine("postgresql+pg8000://", creator=connect, **options)
