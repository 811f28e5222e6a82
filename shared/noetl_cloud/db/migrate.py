"""Run Alembic migrations programmatically (``noetl-cloud db upgrade``).

The migration scripts ship inside the package (``db/migrations``), so an installed wheel - the
container image, a Cloud Run job - can migrate without the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).parent / "migrations"
# The partitions of ``event`` and ``outbox`` (migration 0010, noetl_cloud.retention.partitions): made
# and dropped at run time, not part of the declared schema.
PARTITION = re.compile(r"^(event|outbox)_(p\d{8}|history|default)$")


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic's ``include_name``: every reflected object but the partitions."""
    return not (type_ == "table" and name is not None and PARTITION.match(name))


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(engine: Engine) -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
