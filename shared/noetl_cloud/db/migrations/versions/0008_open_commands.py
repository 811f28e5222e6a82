"""The open commands of an execution through a partial index: every report counts them (the execution
ends when none is left), and through ``ix_command_execution_id`` that count visited every command the
execution ever had, so each step of a long loop cost more than the one before (issue #26).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_command_open",
        "command",
        ["execution_id"],
        postgresql_where=sa.text("status IN ('issued', 'claimed', 'started')"),
    )


def downgrade() -> None:
    op.drop_index("ix_command_open", table_name="command")
