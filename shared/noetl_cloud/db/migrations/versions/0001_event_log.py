"""Event log, stream heads, outbox, executions, catalog.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

EMPTY_JSON = sa.text("'{}'::jsonb")
NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "event",
        sa.Column("position", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=True),
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("stream_version", sa.BigInteger, nullable=False),
        sa.Column("aggregate_id", sa.Text, nullable=False),
        sa.Column("aggregate_type", sa.Text, nullable=False),
        sa.Column("event_type", sa.Text, nullable=False),
        sa.Column("schema_name", sa.Text, nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ingest_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("producer", sa.Text, nullable=False),
        sa.Column("causation_id", sa.Text, nullable=True),
        sa.Column("correlation_id", sa.Text, nullable=True),
        sa.Column("idempotency_key", sa.Text, nullable=True),
        sa.Column("payload", JSONB, nullable=False, server_default=EMPTY_JSON),
        sa.Column("payload_ref", JSONB, nullable=True),
        sa.Column("meta", JSONB, nullable=False, server_default=EMPTY_JSON),
        sa.Column("envelope_checksum", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_event"),
        sa.UniqueConstraint("position", name="uq_event_position"),
        sa.UniqueConstraint("stream_id", "stream_version", name="uq_event_stream_id_stream_version"),
        sa.UniqueConstraint("idempotency_key", name="uq_event_idempotency_key"),
        sa.CheckConstraint("stream_version >= 1", name="ck_event_stream_version_positive"),
    )
    op.create_index("ix_event_execution_id_event_id", "event", ["execution_id", "event_id"])
    op.create_index(
        "ix_event_tenant_id_organization_id_execution_id",
        "event",
        ["tenant_id", "organization_id", "execution_id"],
    )

    op.create_table(
        "stream",
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("stream_id", name="pk_stream"),
    )

    op.create_table(
        "outbox",
        sa.Column("outbox_id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("ordering_key", sa.Text, nullable=True),
        sa.Column("attributes", JSONB, nullable=False, server_default=EMPTY_JSON),
        sa.Column("data", JSONB, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("outbox_id", name="pk_outbox"),
        sa.ForeignKeyConstraint(["event_id"], ["event.event_id"], name="fk_outbox_event_id_event"),
        sa.UniqueConstraint("event_id", "topic", name="uq_outbox_event_id_topic"),
        sa.CheckConstraint("status IN ('pending', 'in_flight', 'published', 'failed')", name="ck_outbox_status_known"),
    )
    op.create_index(
        "ix_outbox_claimable",
        "outbox",
        ["available_at", "outbox_id"],
        postgresql_where=sa.text("status IN ('pending', 'in_flight')"),
    )

    op.create_table(
        "catalog",
        sa.Column("catalog_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("content_sha256", sa.Text, nullable=False),
        sa.Column("document", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("catalog_id", name="pk_catalog"),
        sa.UniqueConstraint(
            "tenant_id",
            "organization_id",
            "path",
            "version",
            name="uq_catalog_tenant_id_organization_id_path_version",
        ),
        sa.UniqueConstraint(
            "tenant_id",
            "organization_id",
            "path",
            "content_sha256",
            name="uq_catalog_tenant_id_organization_id_path_content_sha256",
        ),
        sa.CheckConstraint("kind IN ('Playbook', 'Subscription')", name="ck_catalog_kind_known"),
        sa.CheckConstraint("version >= 1", name="ck_catalog_version_positive"),
    )
    op.create_index("ix_catalog_tenant_id_organization_id_kind", "catalog", ["tenant_id", "organization_id", "kind"])

    op.create_table(
        "execution",
        sa.Column("execution_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("catalog_id", sa.BigInteger, nullable=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("execution_pool", sa.Text, nullable=False),
        sa.Column("parent_execution_id", sa.BigInteger, nullable=True),
        sa.Column("trace", JSONB, nullable=True),
        sa.Column("meta", JSONB, nullable=False, server_default=EMPTY_JSON),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("execution_id", name="pk_execution"),
        sa.ForeignKeyConstraint(["catalog_id"], ["catalog.catalog_id"], name="fk_execution_catalog_id_catalog"),
    )
    op.create_index(
        "ix_execution_tenant_id_organization_id_created_at",
        "execution",
        ["tenant_id", "organization_id", "created_at"],
    )
    op.create_index("ix_execution_parent_execution_id", "execution", ["parent_execution_id"])


def downgrade() -> None:
    op.drop_table("execution")
    op.drop_table("catalog")
    op.drop_table("outbox")
    op.drop_table("stream")
    op.drop_table("event")
