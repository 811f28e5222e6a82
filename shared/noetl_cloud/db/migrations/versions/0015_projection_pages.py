"""Projection surfaces in pages (issue #26 item 3: constant work per step).

``projection.page``: a surface's rows, sorted by id, are stored in pages of a few dozen rows
(``noetl_cloud.replay.pages``), so a fold writes the pages it changed, not the whole surface: at the
tip of a 10,000-iteration loop, one or two pages instead of 3.5 MB of JSON. The primary key gains the
page. A row written before this migration is page 0 holding the whole surface; the projector rewrites
it in pages at its next fold of that surface.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_KEY = ["tenant_id", "organization_id", "execution_id", "projection_type"]


def upgrade() -> None:
    op.add_column("projection", sa.Column("page", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.drop_constraint("pk_projection", "projection", type_="primary")
    op.create_primary_key("pk_projection", "projection", [*_KEY, "page"])


def downgrade() -> None:
    # One row per surface again: the projections stored in more than one page go, tracking row and all,
    # and the projector folds them again from their first event.
    same = (
        "p.tenant_id = {t}.tenant_id AND p.organization_id = {t}.organization_id AND p.execution_id = {t}.execution_id"
    )
    op.execute(
        "DELETE FROM projection_tracking t WHERE EXISTS "
        f"(SELECT 1 FROM projection p WHERE {same.format(t='t')} AND p.page > 0)"
    )
    op.execute(
        f"DELETE FROM projection q WHERE EXISTS (SELECT 1 FROM projection p WHERE {same.format(t='q')} AND p.page > 0)"
    )
    op.drop_constraint("pk_projection", "projection", type_="primary")
    op.create_primary_key("pk_projection", "projection", _KEY)
    op.drop_column("projection", "page")
