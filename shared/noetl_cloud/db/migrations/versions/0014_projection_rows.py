"""Smaller projections (issue #26 item 2): a surface row only when the surface has rows, and no
per-row copies of what the tracking row holds.

* ``projection_tracking.row_kinds``: the row kinds of the execution's projection that have a stored
  row. A kind not listed is the empty surface (a 3-step execution stores ``execution``, ``stages``
  and ``commands``; ``frames``, ``loops``, ``business_objects`` and ``payload_refs`` stay empty and
  are not written). NULL for a projection written before this migration: every kind has a row.
* ``projection``: ``position``, ``last_event_id``, ``event_time_watermark``, ``lag_ms`` and
  ``projected_at`` go (the tracking row holds them for the execution; nothing read them per row),
  and so does the unused ``ix_projection_projected_at``.

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_DROPPED = ("position", "last_event_id", "event_time_watermark", "lag_ms", "projected_at")


def upgrade() -> None:
    op.add_column("projection_tracking", sa.Column("row_kinds", ARRAY(sa.Text), nullable=True))
    op.drop_index("ix_projection_projected_at", table_name="projection")
    for column in _DROPPED:
        op.drop_column("projection", column)


def downgrade() -> None:
    op.add_column("projection", sa.Column("position", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("projection", sa.Column("last_event_id", sa.BigInteger, nullable=True))
    op.add_column("projection", sa.Column("event_time_watermark", sa.DateTime(timezone=True), nullable=True))
    op.add_column("projection", sa.Column("lag_ms", sa.BigInteger, nullable=True))
    op.add_column(
        "projection",
        sa.Column("projected_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
    )
    op.alter_column("projection", "position", server_default=None)
    op.create_index("ix_projection_projected_at", "projection", ["projected_at"])
    # The empty surfaces a projection did not store: the projector refolds a projection missing a kind.
    op.drop_column("projection_tracking", "row_kinds")
