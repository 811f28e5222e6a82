"""A projection row's checksum and registry digest as their bytes (issue #26, bytes per execution).

``projection.checksum`` (a surface's SHA-256, on its last page; empty on the others),
``projection.upcaster_registry_digest`` and ``projection_tracking.upcaster_registry_digest`` (the
upcaster registry's SHA-256) were 64 hex digits of text each: 65 bytes a value, four of them on every
execution's three surface rows and tracking row, and again on every superseded row version the fold
leaves until vacuum. As ``bytea`` they take 33; a 3-step execution's rows are about 230 bytes smaller.
The readers hand them out as hex again (``encode(..., 'hex')`` in their statements), as the event
store does with ``event.envelope_checksum`` since migration 0012. Snapshots keep their text (a few rows
an execution).

A value that is not lower-case hex digits (none the runtime writes) keeps its bytes (the upgrade never
fails on a row); the downgrade writes hex. Both rewrite the two tables: on a large database run it in a
maintenance window.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("projection", ("checksum", "upcaster_registry_digest")),
    ("projection_tracking", ("upcaster_registry_digest",)),
)


def _to_bytes(column: str) -> str:
    return (
        f"CASE WHEN {column} ~ '^([0-9a-f]{{2}})*$' THEN decode({column}, 'hex') ELSE convert_to({column}, 'UTF8') END"
    )


def upgrade() -> None:
    for table, columns in _COLUMNS:
        changes = ", ".join(f"ALTER COLUMN {c} TYPE bytea USING {_to_bytes(c)}" for c in columns)
        op.execute(f"ALTER TABLE {table} {changes}")


def downgrade() -> None:
    for table, columns in _COLUMNS:
        changes = ", ".join(f"ALTER COLUMN {c} TYPE text USING encode({c}, 'hex')" for c in columns)
        op.execute(f"ALTER TABLE {table} {changes}")
