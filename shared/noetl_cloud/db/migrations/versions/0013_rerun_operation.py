"""Bulk re-runs of failed executions as one operation (issue #24, the console's bulk re-run).

``rerun_operation``: one row per operation with its filter, the executions it matched and its progress;
``(tenant_id, organization_id, idempotency_key)`` is unique, so a retried request finds the operation the
first one started (control/bulk_reruns.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rerun_operation",
        sa.Column("operation_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.Text, nullable=False),
        sa.Column("filter", JSONB, nullable=False),
        sa.Column("max_count", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("originals", JSONB, nullable=False),
        sa.Column("results", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("requested_by", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("operation_id", name="pk_rerun_operation"),
        sa.UniqueConstraint(
            "tenant_id",
            "organization_id",
            "idempotency_key",
            name="uq_rerun_operation_tenant_id_organization_id_idempotency_key",
        ),
        sa.CheckConstraint("state IN ('running', 'done', 'failed')", name="ck_rerun_operation_state_known"),
    )


def downgrade() -> None:
    op.drop_table("rerun_operation")
