"""Control plane: commands, subscriptions, the dedup window, catalog gateway paths.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.add_column("catalog", sa.Column("gateway_path", sa.Text, nullable=True))
    op.create_index(
        "ix_catalog_gateway_path", "catalog", ["gateway_path"], postgresql_where=sa.text("gateway_path IS NOT NULL")
    )

    op.create_table(
        "command",
        sa.Column("command_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("step", sa.Text, nullable=False),
        sa.Column("execution_pool", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'issued'")),
        sa.Column("attempt", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("args", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("trace", JSONB, nullable=True),
        sa.Column("issued_event_id", sa.BigInteger, nullable=False),
        sa.Column("worker_id", sa.Text, nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("command_id", name="pk_command"),
        sa.ForeignKeyConstraint(["execution_id"], ["execution.execution_id"], name="fk_command_execution_id_execution"),
        sa.CheckConstraint(
            "status IN ('issued', 'claimed', 'started', 'completed', 'failed', 'cancelled')",
            name="ck_command_status_known",
        ),
    )
    op.create_index("ix_command_execution_id", "command", ["execution_id"])

    op.create_table(
        "subscription",
        sa.Column("subscription_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("catalog_id", sa.BigInteger, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("subscription_id", name="pk_subscription"),
        sa.ForeignKeyConstraint(["catalog_id"], ["catalog.catalog_id"], name="fk_subscription_catalog_id_catalog"),
        sa.CheckConstraint(
            "state IN ('registered', 'active', 'paused', 'draining', 'deactivated')", name="ck_subscription_state_known"
        ),
    )
    op.create_index(
        "uq_subscription_live_path",
        "subscription",
        ["tenant_id", "organization_id", "path"],
        unique=True,
        postgresql_where=sa.text("state <> 'deactivated'"),
    )

    op.create_table(
        "subscription_dedup",
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("dedup_key", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "dedup_key", name="pk_subscription_dedup"),
    )
    op.create_index("ix_subscription_dedup_expires_at", "subscription_dedup", ["expires_at"])


def downgrade() -> None:
    op.drop_table("subscription_dedup")
    op.drop_table("subscription")
    op.drop_table("command")
    op.drop_index("ix_catalog_gateway_path", table_name="catalog")
    op.drop_column("catalog", "gateway_path")
