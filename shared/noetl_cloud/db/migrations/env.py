"""Alembic environment: migrates the engine handed over in ``config.attributes["engine"]``."""

from __future__ import annotations

from alembic import context

from noetl_cloud.db.migrate import include_name
from noetl_cloud.db.schema import metadata

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # pragma: no cover - only reachable through the bare alembic CLI
    raise RuntimeError("run migrations through `noetl-cloud db upgrade`, which supplies the engine")

with engine.begin() as connection:
    context.configure(
        connection=connection, target_metadata=metadata, transaction_per_migration=False, include_name=include_name
    )
    context.run_migrations()
