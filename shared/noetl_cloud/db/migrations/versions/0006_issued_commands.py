"""Commands waiting for a worker, by pool: the partial index a worker's next claim reads.

A worker that reported a command and has no next command of its own execution is handed the oldest
command waiting in its pool (``Orchestrator.claim_queued``): ``status = 'issued'`` rows of one pool,
in id order, through this index (no scan of the whole command table).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_command_issued",
        "command",
        ["tenant_id", "organization_id", "execution_pool", "command_id"],
        postgresql_where=sa.text("status = 'issued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_command_issued", table_name="command")
