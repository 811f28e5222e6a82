"""The migration job's one-time database access (noetl_cloud.dbaccess) on a real PostgreSQL 15.

A throwaway cluster of its own (the local stack's Postgres component, on a free port), with users
named like Cloud SQL's IAM users: before the grants the schema owner cannot create a table; after
them it can, and a runtime role reads and writes the owner's tables, existing and future, without
being able to change the schema. Running the grants again changes nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import sqlalchemy
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.dbaccess import admin_statements, grant, owner_statements
from noetl_cloud.errors import ConfigError
from noetl_cloud.local.postgres import Postgres
from noetl_cloud.settings import Settings

pytestmark = pytest.mark.integration

OWNER = "noetl-migrate@proj.iam"
RUNTIME = ("noetl-execute@proj.iam", "noetl-frames@proj.iam")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The superuser URL of a fresh cluster with a database ``grants`` and the users, no grants yet."""
    postgres = Postgres(tmp_path_factory.mktemp("dbaccess"), _free_port())
    postgres.start()
    try:
        superuser = normalize_url(str(postgres.component().env["NOETL_DATABASE_URL"]))
        engine = create_engine(superuser, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            for user in (OWNER, *RUNTIME):
                connection.execute(text(f"CREATE ROLE \"{user}\" LOGIN PASSWORD 'pw'"))
            connection.execute(text("CREATE DATABASE grants"))
        engine.dispose()
        yield str(make_url(superuser).set(database="grants").render_as_string(hide_password=False))
    finally:
        postgres.stop()


def _as(cluster: str, user: str) -> sqlalchemy.Engine:
    return create_engine(make_url(cluster).set(username=user, password="pw"))


def test_the_statements_quote_iam_user_names() -> None:
    assert admin_statements(OWNER, RUNTIME) == [
        'GRANT ALL ON SCHEMA public TO "noetl-migrate@proj.iam"',
        'GRANT USAGE ON SCHEMA public TO "noetl-execute@proj.iam", "noetl-frames@proj.iam"',
    ]
    assert owner_statements(()) == []
    assert all('"noetl-frames@proj.iam"' in s for s in owner_statements(RUNTIME))
    assert admin_statements('a"b', ())[0].endswith('TO "a""b"')


def test_the_owner_creates_and_the_runtime_roles_use_after_the_grants(cluster: str) -> None:
    owner, runtime = _as(cluster, OWNER), _as(cluster, RUNTIME[0])
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="permission denied for schema public"):
        with owner.begin() as connection:
            connection.execute(text("CREATE TABLE before_grants (id int)"))

    owner_url = make_url(cluster).set(username=OWNER, password="pw").render_as_string(hide_password=False)
    settings = Settings(
        database_url=owner_url,
        db_user=OWNER,
        db_admin_user="noetl",
        db_runtime_users=",".join(RUNTIME),  # type: ignore[arg-type]  # the env's comma-separated form
        db_prepared_statements=False,
    )
    assert settings.db_runtime_users == RUNTIME
    grant(settings, admin_url=cluster)

    with owner.begin() as connection:  # a migration creates a table after the grants
        connection.execute(text("CREATE TABLE executions (id serial PRIMARY KEY, state text)"))
    with runtime.begin() as connection:
        connection.execute(text("INSERT INTO executions (state) VALUES ('started')"))
        connection.execute(text("UPDATE executions SET state = 'done'"))
        assert connection.execute(text("SELECT state FROM executions")).scalar_one() == "done"
    for ddl in ("CREATE TABLE mine (id int)", "DROP TABLE executions", "ALTER TABLE executions ADD c int"):
        with pytest.raises(sqlalchemy.exc.ProgrammingError):
            with runtime.begin() as connection:
                connection.execute(text(ddl))

    # Again (every migration job run does it): nothing changes, nothing fails.
    grant(settings, admin_url=cluster)
    with _as(cluster, RUNTIME[1]).begin() as connection:
        assert connection.execute(text("SELECT count(*) FROM executions")).scalar_one() == 1
    owner.dispose()
    runtime.dispose()


def test_the_job_refuses_to_start_without_its_users() -> None:
    with pytest.raises(ConfigError, match="NOETL_DB_ADMIN_USER"):
        grant(Settings(database_url="postgresql://x@127.0.0.1:1/x", db_user=OWNER))
    with pytest.raises(ConfigError, match="NOETL_DB_ADMIN_PASSWORD"):
        grant(Settings(cloudsql_instance="p:r:i", db_user=OWNER, db_admin_user="noetl-admin", db_iam_auth=True))
