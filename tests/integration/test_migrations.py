"""The migrations produce exactly the schema the code declares, and round-trip."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

from noetl_cloud.db import migrate
from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.schema import metadata
from noetl_cloud.settings import Settings


def _diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        return list(compare_metadata(context, metadata))


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_from_empty_gives_exactly_the_declared_schema(empty_database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        assert _tables(engine) == set()
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision(engine)
        assert _tables(engine) == set(metadata.tables) | {"alembic_version"}
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_downgrade_to_base_and_upgrade_again_round_trips(empty_database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        migrate.upgrade(engine)
        migrate.downgrade(engine, "base")
        assert _tables(engine) == {"alembic_version"}
        assert migrate.current_revision(engine) is None
        migrate.upgrade(engine)
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_a_schema_change_without_a_migration_is_detected(empty_database_url: str) -> None:
    """The drift check itself can fail: a column the code declares but no migration adds shows up."""
    from sqlalchemy import Column, Text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        migrate.upgrade(engine)
        extra = Column("undeclared_in_migrations", Text)
        metadata.tables["catalog"].append_column(extra)
        try:
            diff = _diff(engine)
        finally:
            metadata.tables["catalog"]._columns.remove(extra)
        assert any("undeclared_in_migrations" in repr(d) for d in diff)
        assert _diff(engine) == []
    finally:
        engine.dispose()
