"""Partitioned ``event`` and ``outbox``, the idempotency keys' own table, retention policies and archives.

``event`` becomes ``PARTITION BY RANGE (event_id)``: an event id is a snowflake whose high bits are
milliseconds, so a range of ids is a range of time (one partition per UTC day) and the primary key
``event_id`` (the partition key) stays globally unique. A unique index must contain the partition
key, so the two other unique constraints change:

* ``(stream_id, stream_version)`` becomes a plain index: the stream head's compare-and-set in
  ``stream`` already serializes every append of a stream, it is what hands out the versions.
* ``idempotency_key`` moves to ``event_key`` (unpartitioned, primary key ``idempotency_key``),
  inserted in the same statement as the events, before them: an event whose key the insert skipped
  is not written (the same ``ON CONFLICT DO NOTHING`` semantics, still one round trip).

``position`` keeps its identity (the sequence lives on the parent) and an index, not a unique
constraint: only the identity writes it.

``outbox`` becomes ``PARTITION BY RANGE (created_at)`` (one partition per UTC day; published rows are
deleted by the relay, so an old partition is empty or holds only failed rows when it is dropped). Its
foreign key to ``event`` goes (a partition of ``event`` could not be dropped under it) and
``(event_id, topic)`` is an index (only the event's own insert writes its outbox rows).

Both tables get a ``DEFAULT`` partition, so an append never fails because maintenance fell behind;
``noetl_cloud.retention.partitions`` keeps daily partitions created ahead and moves any row that
landed in the default into its day. Existing rows are copied into a ``*_history`` partition below
today. The copy rewrites the tables: on a large database run it in a maintenance window.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

EMPTY_JSON = sa.text("'{}'::jsonb")
NOW = sa.text("now()")
EPOCH_MS = 1_704_067_200_000  # the snowflake epoch (noetl_cloud.ids)
TIMESTAMP_SHIFT = 22
DAYS_AHEAD = 3

_EVENT_COLUMNS = (
    "position, event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_id, "
    "aggregate_type, event_type, schema_name, schema_version, event_time, ingest_time, producer, causation_id, "
    "correlation_id, idempotency_key, payload, payload_ref, meta, envelope_checksum"
)
_OUTBOX_COLUMNS = (
    "outbox_id, event_id, topic, ordering_key, attributes, data, status, attempts, available_at, created_at, "
    "published_at, last_error"
)


def _first_id(day: datetime) -> int:
    return max(0, int(day.timestamp() * 1000) - EPOCH_MS) << TIMESTAMP_SHIFT


def _event_columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
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
    ]


def _outbox_columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
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
    ]


def _partitions(today: datetime) -> None:
    """``*_history`` below today, one partition per day from today on, and the defaults."""
    first = _first_id(today)
    op.execute(f"CREATE TABLE event_history PARTITION OF event FOR VALUES FROM (MINVALUE) TO ({first})")
    op.execute(f"CREATE TABLE outbox_history PARTITION OF outbox FOR VALUES FROM (MINVALUE) TO ('{today.isoformat()}')")
    for n in range(DAYS_AHEAD + 1):
        day, following = today + timedelta(days=n), today + timedelta(days=n + 1)
        suffix = day.strftime("%Y%m%d")
        op.execute(
            f"CREATE TABLE event_p{suffix} PARTITION OF event "
            f"FOR VALUES FROM ({_first_id(day)}) TO ({_first_id(following)})"
        )
        op.execute(
            f"CREATE TABLE outbox_p{suffix} PARTITION OF outbox "
            f"FOR VALUES FROM ('{day.isoformat()}') TO ('{following.isoformat()}')"
        )
    op.execute("CREATE TABLE event_default PARTITION OF event DEFAULT")
    op.execute("CREATE TABLE outbox_default PARTITION OF outbox DEFAULT")


def _copy(target: str, source: str, columns: str) -> None:
    op.execute(f"INSERT INTO {target} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {source}")


def _restart_identity(table: str, column: str) -> None:
    op.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
        f"coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)"
    )


def upgrade() -> None:
    op.drop_constraint("fk_outbox_event_id_event", "outbox", type_="foreignkey")
    op.rename_table("event", "event_unpartitioned")
    op.rename_table("outbox", "outbox_unpartitioned")
    for name in ("pk_event", "uq_event_position", "uq_event_stream_id_stream_version", "uq_event_idempotency_key"):
        op.execute(f"ALTER TABLE event_unpartitioned RENAME CONSTRAINT {name} TO old_{name}")
    for name in ("pk_outbox", "uq_outbox_event_id_topic"):
        op.execute(f"ALTER TABLE outbox_unpartitioned RENAME CONSTRAINT {name} TO old_{name}")
    for index in (
        "ix_event_execution_id_event_id",
        "ix_event_tenant_id_organization_id_execution_id_position",
        "ix_outbox_claimable",
    ):
        op.execute(f"ALTER INDEX {index} RENAME TO old_{index}")

    op.create_table(
        "event",
        *_event_columns(),
        sa.PrimaryKeyConstraint("event_id", name="pk_event"),
        sa.CheckConstraint("stream_version >= 1", name="ck_event_stream_version_positive"),
        postgresql_partition_by="RANGE (event_id)",
    )
    op.create_index("ix_event_position", "event", ["position"])
    # Narrower than before (measured by bench/scale.py: about 5 kB less per 3-step execution): reads by
    # execution go through (execution_id, position) whatever else they filter on (an execution has one
    # tenant); streams are read by id only for the streams of no execution.
    op.create_index(
        "ix_event_stream_id_stream_version",
        "event",
        ["stream_id", "stream_version"],
        postgresql_where=sa.text("execution_id IS NULL"),
    )
    op.create_index("ix_event_execution_id_position", "event", ["execution_id", "position"])
    op.create_table(
        "outbox",
        *_outbox_columns(),
        sa.PrimaryKeyConstraint("outbox_id", "created_at", name="pk_outbox"),
        sa.CheckConstraint("status IN ('pending', 'in_flight', 'published', 'failed')", name="ck_outbox_status_known"),
        postgresql_partition_by="RANGE (created_at)",
    )
    op.create_index("ix_outbox_event_id_topic", "outbox", ["event_id", "topic"])
    op.create_index(
        "ix_outbox_claimable",
        "outbox",
        ["available_at", "outbox_id"],
        postgresql_where=sa.text("status IN ('pending', 'in_flight')"),
    )
    _partitions(datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0))

    op.create_table(
        "event_key",
        sa.Column("idempotency_key", sa.Text, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("idempotency_key", name="pk_event_key"),
    )

    _copy("event", "event_unpartitioned", _EVENT_COLUMNS)
    op.execute(
        "INSERT INTO event_key (idempotency_key, event_id) "
        "SELECT idempotency_key, event_id FROM event_unpartitioned WHERE idempotency_key IS NOT NULL"
    )
    _copy("outbox", "outbox_unpartitioned", _OUTBOX_COLUMNS)
    _restart_identity("event", "position")
    _restart_identity("outbox", "outbox_id")
    op.drop_table("outbox_unpartitioned")
    op.drop_table("event_unpartitioned")
    _retention_tables()


def _retention_tables() -> None:
    op.create_table(
        "retention_policy",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("retention_days", sa.Integer, nullable=False),
        sa.Column("archive", sa.Boolean, nullable=False, server_default=sa.text("true")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "organization_id", name="pk_retention_policy"),
        sa.CheckConstraint("retention_days >= 1", name="ck_retention_policy_days_positive"),
    )
    op.create_table(
        "execution_archive",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("organization_id", sa.Text, nullable=False),
        sa.Column("execution_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("event_count", sa.BigInteger, nullable=False),
        sa.Column("last_position", sa.BigInteger, nullable=False),
        sa.Column("archive_ref", JSONB, nullable=True),
        sa.Column("execution_created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("execution_id", name="pk_execution_archive"),
    )
    op.create_index(
        "ix_execution_archive_tenant_id_organization_id_execution_id",
        "execution_archive",
        ["tenant_id", "organization_id", "execution_id"],
    )
    # Retention's scan: terminal executions by age (the running ones have no ``ended_at``).
    op.create_index(
        "ix_execution_ended_at", "execution", ["ended_at"], postgresql_where=sa.text("ended_at IS NOT NULL")
    )
    op.create_index("ix_subscription_dedup_execution_id", "subscription_dedup", ["execution_id"])
    op.create_index("ix_projection_snapshot_execution_id", "projection_snapshot", ["execution_id"])


def downgrade() -> None:
    op.drop_index("ix_projection_snapshot_execution_id", table_name="projection_snapshot")
    op.drop_index("ix_subscription_dedup_execution_id", table_name="subscription_dedup")
    op.drop_index("ix_execution_ended_at", table_name="execution")
    op.drop_table("execution_archive")
    op.drop_table("retention_policy")
    op.rename_table("event", "event_partitioned")
    op.rename_table("outbox", "outbox_partitioned")
    op.execute("ALTER TABLE event_partitioned RENAME CONSTRAINT pk_event TO new_pk_event")
    op.execute("ALTER TABLE outbox_partitioned RENAME CONSTRAINT pk_outbox TO new_pk_outbox")
    for index in (
        "ix_event_position",
        "ix_event_stream_id_stream_version",
        "ix_event_execution_id_position",
        "ix_outbox_event_id_topic",
        "ix_outbox_claimable",
    ):
        op.execute(f"ALTER INDEX {index} RENAME TO new_{index}")
    op.create_table(
        "event",
        *_event_columns(),
        sa.PrimaryKeyConstraint("event_id", name="pk_event"),
        sa.UniqueConstraint("position", name="uq_event_position"),
        sa.UniqueConstraint("stream_id", "stream_version", name="uq_event_stream_id_stream_version"),
        sa.UniqueConstraint("idempotency_key", name="uq_event_idempotency_key"),
        sa.CheckConstraint("stream_version >= 1", name="ck_event_stream_version_positive"),
    )
    op.create_index("ix_event_execution_id_event_id", "event", ["execution_id", "event_id"])
    op.create_index(
        "ix_event_tenant_id_organization_id_execution_id_position",
        "event",
        ["tenant_id", "organization_id", "execution_id", "position"],
    )
    op.create_table(
        "outbox",
        *_outbox_columns(),
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
    _copy("event", "event_partitioned", _EVENT_COLUMNS)
    _copy("outbox", "outbox_partitioned", _OUTBOX_COLUMNS)
    _restart_identity("event", "position")
    _restart_identity("outbox", "outbox_id")
    op.drop_table("event_key")
    op.drop_table("outbox_partitioned")
    op.drop_table("event_partitioned")
