"""Stages and frames: leased windows of loop work (distributed-runtime spec §5.1).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NOW = sa.text("now()")
OPEN_FRAMES = sa.text("status IN ('PENDING', 'CLAIMED', 'RUNNING')")


def upgrade() -> None:
    op.create_table(
        "stage",
        sa.Column("stage_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("parent_event_id", sa.BigInteger, nullable=True),
        sa.Column("parent_stage_id", sa.BigInteger, nullable=True),
        sa.Column("loop_event_id", sa.Text, nullable=True),
        sa.Column("opened_event_id", sa.BigInteger, nullable=True),
        sa.Column("closed_event_id", sa.BigInteger, nullable=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("step_name", sa.Text, nullable=False),
        sa.Column("dsl_ref", sa.Text, nullable=False),
        sa.Column("step_run_id", sa.BigInteger, nullable=True),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'OPEN'")),
        sa.Column("frame_policy", JSONB, nullable=False),
        sa.Column("frame_limit", sa.Integer, nullable=True),
        sa.Column("next_frame_index", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("exhausted", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("frames_failed", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("error", JSONB, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("stage_id", name="pk_stage"),
        sa.ForeignKeyConstraint(["execution_id"], ["execution.execution_id"], name="fk_stage_execution_id_execution"),
        sa.ForeignKeyConstraint(["parent_stage_id"], ["stage.stage_id"], name="fk_stage_parent_stage_id_stage"),
        sa.CheckConstraint("kind IN ('loop', 'fanout', 'reduce')", name="ck_stage_kind_known"),
        sa.CheckConstraint("status IN ('OPEN', 'COMPLETED', 'FAILED', 'CANCELLED')", name="ck_stage_status_known"),
    )
    op.create_index(
        "ix_stage_execution_step_loop",
        "stage",
        ["execution_id", "step_name", "loop_event_id"],
        unique=True,
        postgresql_where=sa.text("loop_event_id IS NOT NULL"),
    )
    op.create_index(
        "ix_stage_open", "stage", ["tenant_id", "organization_id"], postgresql_where=sa.text("status = 'OPEN'")
    )
    op.create_table(
        "frame",
        sa.Column("frame_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("stage_id", sa.BigInteger, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("parent_frame_id", sa.BigInteger, nullable=True),
        sa.Column("frame_index", sa.Integer, nullable=False),
        sa.Column("command_id", sa.BigInteger, nullable=True),
        sa.Column("claimed_event_id", sa.BigInteger, nullable=True),
        sa.Column("terminal_event_id", sa.BigInteger, nullable=True),
        sa.Column("cursor", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("row_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'PENDING'")),
        sa.Column("owner_worker", sa.Text, nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("output_ref", JSONB, nullable=True),
        sa.Column("events_emitted", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("heartbeats", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("error", JSONB, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("frame_id", name="pk_frame"),
        sa.ForeignKeyConstraint(["stage_id"], ["stage.stage_id"], name="fk_frame_stage_id_stage"),
        sa.ForeignKeyConstraint(["execution_id"], ["execution.execution_id"], name="fk_frame_execution_id_execution"),
        sa.ForeignKeyConstraint(["parent_frame_id"], ["frame.frame_id"], name="fk_frame_parent_frame_id_frame"),
        sa.UniqueConstraint("stage_id", "frame_index", name="uq_frame_stage_id_frame_index"),
        sa.CheckConstraint(
            "status IN ('PENDING', 'CLAIMED', 'RUNNING', 'COMMITTED', 'FAILED')", name="ck_frame_status_known"
        ),
    )
    op.create_index("ix_frame_claimable", "frame", ["stage_id", "status", "lease_until"], postgresql_where=OPEN_FRAMES)
    op.create_index(
        "ix_frame_leased", "frame", ["lease_until"], postgresql_where=sa.text("status IN ('CLAIMED', 'RUNNING')")
    )
    op.create_index("ix_frame_command_id", "frame", ["command_id"], postgresql_where=sa.text("command_id IS NOT NULL"))
    op.create_index("ix_frame_execution_id", "frame", ["execution_id"])


def downgrade() -> None:
    op.drop_table("frame")
    op.drop_table("stage")
