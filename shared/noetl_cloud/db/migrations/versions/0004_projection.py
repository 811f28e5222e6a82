"""Projections, replay-state snapshots, and the replay read index of the event log.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "projection",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("projection_type", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("last_event_id", sa.BigInteger, nullable=True),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("checksum", sa.Text, nullable=False),
        sa.Column("upcaster_registry_digest", sa.Text, nullable=False),
        sa.Column("reducer_version", sa.Integer, nullable=False),
        sa.Column("event_time_watermark", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lag_ms", sa.BigInteger, nullable=True),
        sa.Column("projected_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint(
            "tenant_id", "organization_id", "execution_id", "projection_type", name="pk_projection"
        ),
        sa.CheckConstraint(
            "projection_type IN ('execution', 'stages', 'frames', 'commands', 'loops', 'business_objects', "
            "'payload_refs')",
            name="ck_projection_type_known",
        ),
        sa.CheckConstraint("version >= 0", name="ck_projection_version_not_negative"),
    )
    op.create_index("ix_projection_projected_at", "projection", ["projected_at"])
    op.create_table(
        "projection_snapshot",
        sa.Column("snapshot_id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("aggregate_type", sa.Text, nullable=False, server_default=sa.text("'replay_state'")),
        sa.Column("aggregate_id", sa.Text, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("event_count", sa.BigInteger, nullable=False),
        sa.Column("last_event_id", sa.BigInteger, nullable=True),
        sa.Column("upcaster_registry_digest", sa.Text, nullable=False),
        sa.Column("reducer_version", sa.Integer, nullable=False),
        sa.Column("checksum", sa.Text, nullable=False),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("snapshot_id", name="pk_projection_snapshot"),
        sa.UniqueConstraint(
            "tenant_id",
            "organization_id",
            "execution_id",
            "upcaster_registry_digest",
            "reducer_version",
            "position",
            name="uq_projection_snapshot_position",
        ),
    )
    op.create_index(
        "ix_event_tenant_id_organization_id_execution_id_position",
        "event",
        ["tenant_id", "organization_id", "execution_id", "position"],
    )


def downgrade() -> None:
    op.drop_index("ix_event_tenant_id_organization_id_execution_id_position", table_name="event")
    op.drop_table("projection_snapshot")
    op.drop_index("ix_projection_projected_at", table_name="projection")
    op.drop_table("projection")
