"""One index fewer on every event: ``(tenant_id, organization_id, execution_id)`` is the leading part
of ``(tenant_id, organization_id, execution_id, position)``, which serves every query the shorter one
served. Each appended event wrote an entry into both.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_event_tenant_id_organization_id_execution_id", table_name="event")


def downgrade() -> None:
    op.create_index(
        "ix_event_tenant_id_organization_id_execution_id", "event", ["tenant_id", "organization_id", "execution_id"]
    )
