"""A projector that keeps up, bounded snapshots, maintenance driven by indexes (issue #26 items 2, 4, 5).

* ``projection_tracking``: one row per projected execution — the tracking position, the number of
  events folded and what they were folded with. A delivery's duplicate check reads only this row;
  the surface rows in ``projection`` are written only when an event changes them.
* ``projector_checkpoint``: how far the projector's catch-up has looked through the log (store
  positions), per tenant and organization; each run visits only the events written since.
* ``projection_snapshot.state_compressed``: snapshots are stored as zlib-compressed canonical JSON
  (``state`` stays for the rows written before; one of the two is set).
* ``ix_command_issued_stale``: the reaper's re-notify reads the commands still ``issued`` in
  ``updated_at`` order through this partial index, not the whole command table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "projection_tracking",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("last_event_id", sa.BigInteger, nullable=True),
        sa.Column("upcaster_registry_digest", sa.Text, nullable=False),
        sa.Column("reducer_version", sa.Integer, nullable=False),
        sa.Column("event_time_watermark", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lag_ms", sa.BigInteger, nullable=True),
        sa.Column("projected_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "organization_id", "execution_id", name="pk_projection_tracking"),
        sa.CheckConstraint("version >= 0", name="ck_projection_tracking_version_not_negative"),
    )
    op.create_index("ix_projection_tracking_projected_at", "projection_tracking", ["projected_at"])
    op.create_table(
        "projector_checkpoint",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("checked_position", sa.BigInteger, nullable=False),
        sa.Column("pending_position", sa.BigInteger, nullable=False),
        sa.Column("pending_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "organization_id", name="pk_projector_checkpoint"),
    )
    op.add_column("projection_snapshot", sa.Column("state_compressed", sa.LargeBinary, nullable=True))
    op.alter_column("projection_snapshot", "state", nullable=True)
    op.create_check_constraint(
        op.f("ck_projection_snapshot_state_present"),
        "projection_snapshot",
        "state IS NOT NULL OR state_compressed IS NOT NULL",
    )
    op.create_index(
        "ix_command_issued_stale",
        "command",
        ["tenant_id", "organization_id", "updated_at"],
        postgresql_where=sa.text("status = 'issued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_command_issued_stale", table_name="command")
    op.execute("DELETE FROM projection_snapshot WHERE state IS NULL")
    op.drop_constraint(op.f("ck_projection_snapshot_state_present"), "projection_snapshot", type_="check")
    op.alter_column("projection_snapshot", "state", nullable=False)
    op.drop_column("projection_snapshot", "state_compressed")
    op.drop_table("projector_checkpoint")
    op.drop_index("ix_projection_tracking_projected_at", table_name="projection_tracking")
    op.drop_table("projection_tracking")
