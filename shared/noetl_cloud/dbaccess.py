"""The one-time database access of a new Cloud SQL instance, run by the migration job before each upgrade.

PostgreSQL 15 grants nothing on the ``public`` schema to new users, and an IAM database user cannot
grant itself anything, so a fresh instance needs, once, a privileged user to let the schema owner
(the migration job's IAM user) create tables and the runtime roles (execute, frames, projector) use
the schema; then the schema owner gives the runtime roles data access to what it creates. Both steps
are idempotent (GRANT and ALTER DEFAULT PRIVILEGES of what is already granted change nothing), so
the job runs them before every ``noetl-cloud db upgrade`` instead of a person running them by hand.

    python -m noetl_cloud.dbaccess     (NOETL_DB_ADMIN_USER / NOETL_DB_ADMIN_PASSWORD: the built-in
                                        user Terraform creates; NOETL_DB_USER: the schema owner;
                                        NOETL_DB_RUNTIME_USERS: the runtime roles' database users)

The statements are built by pure functions; :func:`grant` runs them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from sqlalchemy import Engine, text

from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.errors import ConfigError
from noetl_cloud.observability import configure_logging
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

SCHEMA = "public"


def quote_identifier(name: str) -> str:
    """A PostgreSQL identifier in double quotes (IAM user names hold ``@`` and ``.``)."""
    if not name or "\x00" in name:
        raise ConfigError(f"{name!r} is not a database user name", code="config_invalid")
    return '"' + name.replace('"', '""') + '"'


def admin_statements(owner: str, runtime_users: tuple[str, ...]) -> list[str]:
    """What only a privileged user may do: let the owner create in the schema, the runtime roles use it."""
    statements = [f"GRANT ALL ON SCHEMA {SCHEMA} TO {quote_identifier(owner)}"]
    if runtime_users:
        users = ", ".join(quote_identifier(u) for u in runtime_users)
        statements.append(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {users}")
    return statements


def owner_statements(runtime_users: tuple[str, ...]) -> list[str]:
    """What the schema owner grants the runtime roles: data access (no DDL) to its tables and
    sequences, those that exist and those its later migrations create."""
    if not runtime_users:
        return []
    users = ", ".join(quote_identifier(u) for u in runtime_users)
    return [
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {SCHEMA} TO {users}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {users}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {SCHEMA} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {users}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {SCHEMA} GRANT USAGE, SELECT ON SEQUENCES TO {users}",
    ]


def _run(engine: Engine, statements: list[str]) -> None:
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def grant(settings: Settings, *, admin_url: str | None = None) -> None:
    """Run the admin statements as the built-in user, then the owner's as the schema owner (the job's
    own settings). ``admin_url`` replaces the admin connection (a plain DSN, for local databases)."""
    settings.require("db_user", "db_admin_user")
    assert settings.db_user is not None and settings.db_admin_user is not None
    if admin_url is not None:
        admin = Settings(database_url=admin_url, db_prepared_statements=False)
    else:
        settings.require("db_admin_password")
        admin = settings.model_copy(
            update={"db_user": settings.db_admin_user, "db_password": settings.db_admin_password, "db_iam_auth": False}
        )
    runtime = settings.db_runtime_users
    _run(create_db_engine(admin, pool_size=1, max_overflow=0), admin_statements(settings.db_user, runtime))
    _run(create_db_engine(settings, pool_size=1, max_overflow=0), owner_statements(runtime))
    log.info("database access granted: owner %s, runtime users %s", settings.db_user, ", ".join(runtime))


def main(env: Mapping[str, str] | None = None) -> int:
    settings = Settings.from_env(os.environ if env is None else env)
    configure_logging(settings.log_level, project_id=settings.project_id, role=settings.role)
    grant(settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
