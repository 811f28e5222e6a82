"""Scheduled subscriptions run by the execute role's tick (issue #23 item 4).

``subscription_schedule_run``: one row per (subscription, due slot of its cadence), inserted by the
tick that runs the slot; the primary key makes a second tick that sees the same slot due skip it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "subscription_schedule_run",
        sa.Column("subscription_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("polled", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("started", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("duplicates", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("failed", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("subscription_id", "due_at", name="pk_subscription_schedule_run"),
        sa.CheckConstraint("status IN ('running', 'ok', 'error')", name="ck_subscription_schedule_run_status_known"),
    )


def downgrade() -> None:
    op.drop_table("subscription_schedule_run")
