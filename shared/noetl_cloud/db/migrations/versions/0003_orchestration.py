"""Distributed execution: the execution's token state, command kinds and leases, loop runs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

EMPTY = sa.text("'{}'::jsonb")


def upgrade() -> None:
    op.add_column("execution", sa.Column("workload", JSONB, nullable=False, server_default=EMPTY))
    op.add_column("execution", sa.Column("ctx", JSONB, nullable=False, server_default=EMPTY))
    op.add_column("execution", sa.Column("results", JSONB, nullable=False, server_default=EMPTY))
    op.add_column("execution", sa.Column("error", JSONB, nullable=True))
    op.add_column("execution", sa.Column("tokens_fired", sa.Integer, nullable=False, server_default=sa.text("0")))

    op.add_column("command", sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'step'")))
    op.add_column("command", sa.Column("step_run_id", sa.BigInteger, nullable=True))
    op.add_column("command", sa.Column("iteration", sa.Integer, nullable=True))
    op.add_column("command", sa.Column("item", JSONB, nullable=True))
    op.add_column("command", sa.Column("max_attempts", sa.Integer, nullable=False, server_default=sa.text("3")))
    op.add_column("command", sa.Column("result", JSONB, nullable=True))
    op.add_column("command", sa.Column("error", JSONB, nullable=True))
    op.create_check_constraint("kind_known", "command", "kind IN ('step', 'iteration')")
    op.create_index(
        "ix_command_lease_expires_at",
        "command",
        ["lease_expires_at"],
        postgresql_where=sa.text("status IN ('claimed', 'started')"),
    )

    op.create_table(
        "loop_run",
        sa.Column("step_run_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False),
        sa.Column("step", sa.Text, nullable=False),
        sa.Column("args", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("max_in_flight", sa.Integer, nullable=False),
        sa.Column("items", JSONB, nullable=False),
        sa.Column("next_index", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("in_flight", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("results", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("ctx_owners", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("failed_index", sa.Integer, nullable=True),
        sa.Column("error", JSONB, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("step_run_id", name="pk_loop_run"),
        sa.ForeignKeyConstraint(
            ["execution_id"], ["execution.execution_id"], name="fk_loop_run_execution_id_execution"
        ),
        sa.CheckConstraint("mode IN ('sequential', 'parallel')", name="ck_loop_run_mode_known"),
    )
    op.create_index("ix_loop_run_execution_id", "loop_run", ["execution_id"])


def downgrade() -> None:
    op.drop_table("loop_run")
    op.drop_index("ix_command_lease_expires_at", table_name="command")
    op.drop_constraint("kind_known", "command", type_="check")
    for column in ("error", "result", "max_attempts", "item", "iteration", "step_run_id", "kind"):
        op.drop_column("command", column)
    for column in ("tokens_fired", "error", "results", "ctx", "workload"):
        op.drop_column("execution", column)
