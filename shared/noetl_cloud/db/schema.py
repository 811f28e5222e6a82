"""Table definitions: the schema the code expects.

Alembic migrations create this schema; ``tests/integration/test_migrations.py`` proves that
``alembic upgrade head`` from an empty database gives exactly these tables, columns, indexes and
constraints. Change a table here only together with a new migration.

Ids minted by the application (events, executions, catalog entries) are snowflakes stored as
``bigint``; JSON carries them as decimal strings.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _now() -> Column:  # type: ignore[type-arg]
    return Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()"))


# The canonical, append-only event log (spec §3.1). ``position`` is the store's global order
# (the "backend position" replay cuts at); ``(stream_id, stream_version)`` orders one stream.
# Partitioned by range of ``event_id`` (a snowflake: a range of ids is a range of time), one
# partition per UTC day, kept ahead and retired by ``noetl_cloud.retention``.
event = Table(
    "event",
    metadata,
    Column("position", BigInteger, Identity(always=True), nullable=False),
    Column("event_id", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("execution_id", BigInteger, nullable=True),
    # After its execution's "execution/<id>" (noetl_cloud.eventlog.stored, migration 0018).
    Column("stream_id", Text, nullable=False),
    Column("stream_version", BigInteger, nullable=False),
    # NULL: the execution id; the default schema name noetl.<event_type>; the execution id or no correlation
    # (noetl_cloud.eventlog.stored, migration 0012).
    Column("aggregate_id", Text, nullable=True),
    Column("aggregate_type", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("schema_name", Text, nullable=True),
    Column("schema_version", Integer, nullable=False),
    Column("event_time", DateTime(timezone=True), nullable=False),
    Column("ingest_time", DateTime(timezone=True), nullable=False),
    Column("producer", Text, nullable=False),
    Column("causation_id", Text, nullable=True),  # an earlier event's id as the distance back (0018)
    Column("correlation_id", Text, nullable=True),
    Column("idempotency_key", Text, nullable=True),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("payload_ref", JSONB, nullable=True),
    Column("meta", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("envelope_checksum", LargeBinary, nullable=False),  # the sha256's 32 bytes (migration 0012)
    CheckConstraint("stream_version >= 1", name="stream_version_positive"),
    # A unique index must hold the partition key (``event_id``): the stream head's compare-and-set
    # hands out ``(stream_id, stream_version)`` and the identity ``position``, ``event_key`` guards
    # the idempotency keys (migration 0010, docs/retention.md).
    Index(None, "position"),
    # Executions' events are read by execution (replay, the executions API, catch-up): one narrow index
    # serves them all; streams by id only those of no execution (catalog, subscriptions).
    Index(None, "stream_id", "stream_version", postgresql_where=text("execution_id IS NULL")),
    Index(None, "execution_id", "position"),
    postgresql_partition_by="RANGE (event_id)",
)

# The idempotency keys of ``event`` (a unique constraint of a partitioned table would have to hold the
# partition key): inserted before the events, in the same statement; an event whose key it skipped is
# not written. Its rows leave with their event's partition (retention deletes them by key, joining the
# partition it drops: no second index, every appended key costs one index entry). A key is stored as
# 16 bytes, its execution id then 64 bits of its digest (``noetl_cloud.eventlog.keys``, migrations 0012
# and 0016: the index's inserts follow time); the event row keeps its text.
event_key = Table(
    "event_key",
    metadata,
    Column("key_digest", UUID(as_uuid=True), primary_key=True),
    Column("event_id", BigInteger, nullable=False),
)

# One row per stream: its current version. Appends bump it with a compare-and-set, so a writer
# with a stale expected version gets a typed conflict without aborting its transaction.
stream = Table(
    "stream",
    metadata,
    Column("stream_id", Text, primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

# Transactional outbox: a row per message to publish, written with the change that causes it.
outbox = Table(
    "outbox",
    metadata,
    Column("outbox_id", BigInteger, Identity(always=True), primary_key=True),
    Column("event_id", BigInteger, nullable=True),
    Column("topic", Text, nullable=False),
    Column("ordering_key", Text, nullable=True),
    Column("attributes", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("data", JSONB, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("available_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("created_at", DateTime(timezone=True), primary_key=True, server_default=text("now()")),
    Column("published_at", DateTime(timezone=True), nullable=True),
    Column("last_error", Text, nullable=True),
    Index(None, "event_id", "topic"),
    CheckConstraint("status IN ('pending', 'in_flight', 'published', 'failed')", name="status_known"),
    Index(
        "ix_outbox_claimable",
        "available_at",
        "outbox_id",
        postgresql_where=text("status IN ('pending', 'in_flight')"),
    ),
    # By day of ``created_at``; published rows are deleted by the relay, old partitions are dropped.
    postgresql_partition_by="RANGE (created_at)",
)

execution = Table(
    "execution",
    metadata,
    Column("execution_id", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("catalog_id", BigInteger, ForeignKey("catalog.catalog_id"), nullable=True),
    Column("path", Text, nullable=False),
    Column("version", Integer, nullable=True),
    Column("status", Text, nullable=False),
    Column("execution_pool", Text, nullable=False),
    Column("parent_execution_id", BigInteger, nullable=True),
    Column("trace", JSONB, nullable=True),
    Column("meta", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _now(),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    # The token state the orchestrator folds as commands report (DSL §3): the merged workload,
    # ``ctx``, the last result of each step, the failure, and how many tokens have fired.
    Column("workload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("ctx", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("results", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("error", JSONB, nullable=True),
    Column("tokens_fired", Integer, nullable=False, server_default=text("0")),
    Index(None, "tenant_id", "organization_id", "created_at"),
    Index(None, "parent_execution_id"),
    # Retention's scan: terminal executions by age (a running execution has no ``ended_at``).
    Index(None, "ended_at", postgresql_where=text("ended_at IS NOT NULL")),
)

catalog = Table(
    "catalog",
    metadata,
    Column("catalog_id", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("kind", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("content_sha256", Text, nullable=False),
    Column("document", JSONB, nullable=False),
    Column("gateway_path", Text, nullable=True),
    _now(),
    UniqueConstraint("tenant_id", "organization_id", "path", "version"),
    UniqueConstraint("tenant_id", "organization_id", "path", "content_sha256"),
    CheckConstraint("kind IN ('Playbook', 'Subscription')", name="kind_known"),
    CheckConstraint("version >= 1", name="version_positive"),
    Index(None, "tenant_id", "organization_id", "kind"),
    Index(None, "gateway_path", postgresql_where=text("gateway_path IS NOT NULL")),
)


# A unit of work for a worker: one step of one execution. Issued in the transaction that writes
# its ``command.issued`` event; a worker claims it atomically before it runs.
command = Table(
    "command",
    metadata,
    Column("command_id", BigInteger, primary_key=True, autoincrement=False),
    Column("execution_id", BigInteger, ForeignKey("execution.execution_id"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("step", Text, nullable=False),
    Column("execution_pool", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'issued'")),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("args", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("trace", JSONB, nullable=True),
    Column("issued_event_id", BigInteger, nullable=False),
    Column("worker_id", Text, nullable=True),
    Column("lease_expires_at", DateTime(timezone=True), nullable=True),
    _now(),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("kind", Text, nullable=False, server_default=text("'step'")),
    Column("step_run_id", BigInteger, nullable=True),
    Column("iteration", Integer, nullable=True),
    Column("item", JSONB, nullable=True),
    Column("max_attempts", Integer, nullable=False, server_default=text("3")),
    Column("result", JSONB, nullable=True),
    Column("error", JSONB, nullable=True),
    CheckConstraint(
        "status IN ('issued', 'claimed', 'started', 'completed', 'failed', 'cancelled')", name="status_known"
    ),
    CheckConstraint("kind IN ('step', 'iteration')", name="kind_known"),
    Index(None, "execution_id"),
    # Its open commands, which every report counts (migration 0008).
    Index("ix_command_open", "execution_id", postgresql_where=text("status IN ('issued', 'claimed', 'started')")),
    Index(None, "lease_expires_at", postgresql_where=text("status IN ('claimed', 'started')")),
    Index(
        "ix_command_issued",
        "tenant_id",
        "organization_id",
        "execution_pool",
        "command_id",
        postgresql_where=text("status = 'issued'"),
    ),
    # The reaper's re-notify: commands still issued, oldest ``updated_at`` first (migration 0009).
    Index(
        "ix_command_issued_stale",
        "tenant_id",
        "organization_id",
        "updated_at",
        postgresql_where=text("status = 'issued'"),
    ),
)

# One loop step run (DSL §7): its collection, the iteration commands in flight, the results by
# index, which iteration wrote each ``ctx`` key (the write-once guard of parallel loops, §6.6).
loop_run = Table(
    "loop_run",
    metadata,
    Column("step_run_id", BigInteger, primary_key=True, autoincrement=False),
    Column("execution_id", BigInteger, ForeignKey("execution.execution_id"), nullable=False),
    Column("step", Text, nullable=False),
    Column("args", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("mode", Text, nullable=False),
    Column("max_in_flight", Integer, nullable=False),
    Column("items", JSONB, nullable=False),
    Column("next_index", Integer, nullable=False, server_default=text("0")),
    Column("in_flight", Integer, nullable=False, server_default=text("0")),
    Column("results", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("ctx_owners", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("failed_index", Integer, nullable=True),
    Column("error", JSONB, nullable=True),
    _now(),
    CheckConstraint("mode IN ('sequential', 'parallel')", name="mode_known"),
    Index(None, "execution_id"),
)

# A registered subscription and its lifecycle state. ``version`` counts transitions: every
# change is a compare-and-set on it, and it equals the version of the subscription's stream.
subscription = Table(
    "subscription",
    metadata,
    Column("subscription_id", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("catalog_id", BigInteger, ForeignKey("catalog.catalog_id"), nullable=False),
    Column("path", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("version", Integer, nullable=False),
    _now(),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    CheckConstraint("state IN ('registered', 'active', 'paused', 'draining', 'deactivated')", name="state_known"),
    Index(
        "uq_subscription_live_path",
        "tenant_id",
        "organization_id",
        "path",
        unique=True,
        postgresql_where=text("state <> 'deactivated'"),
    ),
)

# The opt-in dedup window: a key claimed in the transaction that creates its execution.
subscription_dedup = Table(
    "subscription_dedup",
    metadata,
    Column("scope", Text, primary_key=True),
    Column("dedup_key", Text, primary_key=True),
    Column("execution_id", BigInteger, nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index(None, "expires_at"),
    Index(None, "execution_id"),
)

# Scheduled subscriptions' runs (control/scheduled.py): one row per (subscription, due slot), claimed by
# the insert that starts it, so two ticks that see the same slot due run it once.
subscription_schedule_run = Table(
    "subscription_schedule_run",
    metadata,
    Column("subscription_id", BigInteger, primary_key=True, autoincrement=False),
    Column("due_at", DateTime(timezone=True), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("polled", Integer, nullable=False, server_default=text("0")),
    Column("started", Integer, nullable=False, server_default=text("0")),
    Column("duplicates", Integer, nullable=False, server_default=text("0")),
    Column("failed", Integer, nullable=False, server_default=text("0")),
    Column("error", Text, nullable=True),
    CheckConstraint("status IN ('running', 'ok', 'error')", name="status_known"),
)

# Bulk re-runs (control/bulk_reruns.py): one row per operation, its filter, the executions it matched
# (``originals``, snapshotted when it was asked) and its progress; the idempotency key is unique per tenant,
# so a retried request finds the operation the first one started instead of starting another.
rerun_operation = Table(
    "rerun_operation",
    metadata,
    Column("operation_id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("filter", JSONB, nullable=False),
    Column("max_count", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("originals", JSONB, nullable=False),
    Column("results", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("requested_by", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("tenant_id", "organization_id", "idempotency_key"),
    CheckConstraint("state IN ('running', 'done', 'failed')", name="state_known"),
)

# Live projections (spec §7.4), one row per (execution, surface) that has rows: the surface's rows as
# folded by the projector and the number of events folded when it was last written (``version``:
# upserts only ever raise it). ``payload_refs`` keeps the lineage. The execution's tracking row says
# which kinds have a row (``row_kinds``); a kind without one is the empty surface.
projection = Table(
    "projection",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("organization_id", Text, primary_key=True),
    Column("execution_id", BigInteger, primary_key=True, autoincrement=False),
    Column("projection_type", Text, primary_key=True),
    # A surface's rows sorted by id, in pages (replay/pages.py); the last page's checksum is the surface's.
    Column("page", Integer, primary_key=True, autoincrement=False, server_default=text("0")),
    Column("version", BigInteger, nullable=False),
    Column("state", JSONB, nullable=False),
    # The SHA-256s' 32 bytes (migration 0017); the readers hand them out as hex.
    Column("checksum", LargeBinary, nullable=False),
    Column("upcaster_registry_digest", LargeBinary, nullable=False),
    Column("reducer_version", Integer, nullable=False),
    CheckConstraint(
        "projection_type IN ('execution', 'stages', 'frames', 'commands', 'loops', 'business_objects', 'payload_refs')",
        name="type_known",
    ),
    CheckConstraint("version >= 0", name="version_not_negative"),
)

# Replay-state snapshots (spec §3.2): the whole state of an execution at ``position``, with what it
# was folded with. Replay seeds only from a snapshot of its own registry digest and reducer version.
projection_snapshot = Table(
    "projection_snapshot",
    metadata,
    Column("snapshot_id", BigInteger, Identity(always=True), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("execution_id", BigInteger, nullable=False),
    Column("aggregate_type", Text, nullable=False, server_default=text("'replay_state'")),
    Column("aggregate_id", Text, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("event_count", BigInteger, nullable=False),
    Column("last_event_id", BigInteger, nullable=True),
    Column("upcaster_registry_digest", Text, nullable=False),
    Column("reducer_version", Integer, nullable=False),
    Column("checksum", Text, nullable=False),
    Column("state", JSONB, nullable=True),  # rows written before migration 0009
    Column("state_compressed", LargeBinary, nullable=True),  # zlib of the state's canonical JSON
    _now(),
    CheckConstraint("state IS NOT NULL OR state_compressed IS NOT NULL", name="state_present"),
    UniqueConstraint(
        "tenant_id",
        "organization_id",
        "execution_id",
        "upcaster_registry_digest",
        "reducer_version",
        "position",
        name="uq_projection_snapshot_position",
    ),
    Index(None, "execution_id"),
)

# The projector's tracking row of one execution (migration 0009): the position of the last event folded,
# how many were folded (``version``) and with what. A delivery's duplicate check reads only this row.
projection_tracking = Table(
    "projection_tracking",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("organization_id", Text, primary_key=True),
    Column("execution_id", BigInteger, primary_key=True, autoincrement=False),
    Column("version", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("last_event_id", BigInteger, nullable=True),
    Column("upcaster_registry_digest", LargeBinary, nullable=False),  # its 32 bytes (migration 0017)
    Column("reducer_version", Integer, nullable=False),
    Column("event_time_watermark", DateTime(timezone=True), nullable=True),
    Column("lag_ms", BigInteger, nullable=True),
    Column("projected_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("row_kinds", ARRAY(Text), nullable=True),  # kinds with a projection row; NULL: every kind (pre-0013)
    CheckConstraint("version >= 0", name="version_not_negative"),
    Index(None, "projected_at"),
)

# How far the projector's catch-up has looked through the log, per scope: every event at or below
# ``checked_position`` was looked at; ``pending_position`` was the log's tip at ``pending_at`` (the next
# run's bound once it is older than the settle time).
projector_checkpoint = Table(
    "projector_checkpoint",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("organization_id", Text, primary_key=True),
    Column("checked_position", BigInteger, nullable=False),
    Column("pending_position", BigInteger, nullable=False),
    Column("pending_at", DateTime(timezone=True), nullable=False),
)

# Stages and frames (distributed-runtime spec §5.1, docs/frames.md): a stage is one loop step run whose
# work is cut into frames; a frame is a worker-claimable window of that work with a lease. Frames are
# minted lazily at the stage's next boundary (``next_frame_index``) until the cursor is exhausted or
# ``frame_limit`` is reached; ``(stage_id, frame_index)`` is the mint's idempotency boundary.
stage = Table(
    "stage",
    metadata,
    Column("stage_id", BigInteger, primary_key=True, autoincrement=False),
    Column("execution_id", BigInteger, ForeignKey("execution.execution_id"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("parent_event_id", BigInteger, nullable=True),
    Column("parent_stage_id", BigInteger, ForeignKey("stage.stage_id"), nullable=True),
    Column("loop_event_id", Text, nullable=True),
    Column("opened_event_id", BigInteger, nullable=True),
    Column("closed_event_id", BigInteger, nullable=True),
    Column("kind", Text, nullable=False),
    Column("step_name", Text, nullable=False),
    Column("dsl_ref", Text, nullable=False),
    Column("step_run_id", BigInteger, nullable=True),
    Column("status", Text, nullable=False, server_default=text("'OPEN'")),
    Column("frame_policy", JSONB, nullable=False),
    Column("frame_limit", Integer, nullable=True),
    Column("next_frame_index", Integer, nullable=False, server_default=text("0")),
    Column("exhausted", Boolean, nullable=False, server_default=text("false")),
    Column("frames_failed", Integer, nullable=False, server_default=text("0")),
    Column("error", JSONB, nullable=True),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("kind IN ('loop', 'fanout', 'reduce')", name="kind_known"),
    CheckConstraint("status IN ('OPEN', 'COMPLETED', 'FAILED', 'CANCELLED')", name="status_known"),
    Index(
        "ix_stage_execution_step_loop",
        "execution_id",
        "step_name",
        "loop_event_id",
        unique=True,
        postgresql_where=text("loop_event_id IS NOT NULL"),
    ),
    Index("ix_stage_open", "tenant_id", "organization_id", postgresql_where=text("status = 'OPEN'")),
)

frame = Table(
    "frame",
    metadata,
    Column("frame_id", BigInteger, primary_key=True, autoincrement=False),
    Column("stage_id", BigInteger, ForeignKey("stage.stage_id"), nullable=False),
    Column("execution_id", BigInteger, ForeignKey("execution.execution_id"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("parent_frame_id", BigInteger, ForeignKey("frame.frame_id"), nullable=True),
    Column("frame_index", Integer, nullable=False),
    Column("command_id", BigInteger, nullable=True),
    Column("claimed_event_id", BigInteger, nullable=True),
    Column("terminal_event_id", BigInteger, nullable=True),
    Column("cursor", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("row_count", Integer, nullable=False, server_default=text("0")),
    Column("status", Text, nullable=False, server_default=text("'PENDING'")),
    Column("owner_worker", Text, nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("output_ref", JSONB, nullable=True),
    Column("events_emitted", Integer, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("heartbeats", Integer, nullable=False, server_default=text("0")),
    Column("error", JSONB, nullable=True),
    _now(),
    Column("completed_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("stage_id", "frame_index"),
    CheckConstraint("status IN ('PENDING', 'CLAIMED', 'RUNNING', 'COMMITTED', 'FAILED')", name="status_known"),
    # Only claimable rows are in it: a committed frame leaves the index, so claims do not wade
    # through dead entries as a stage's frames pile up.
    Index(
        "ix_frame_claimable",
        "stage_id",
        "status",
        "lease_until",
        postgresql_where=text("status IN ('PENDING', 'CLAIMED', 'RUNNING')"),
    ),
    Index("ix_frame_leased", "lease_until", postgresql_where=text("status IN ('CLAIMED', 'RUNNING')")),
    Index("ix_frame_command_id", "command_id", postgresql_where=text("command_id IS NOT NULL")),
    Index(None, "execution_id"),
)


# Retention (docs/retention.md): a tenant's or organization's own number of days, over
# ``NOETL_RETENTION_DAYS``; ``organization_id = '*'`` covers every organization of the tenant.
retention_policy = Table(
    "retention_policy",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("organization_id", Text, primary_key=True),
    Column("retention_days", Integer, nullable=False),
    Column("archive", Boolean, nullable=False, server_default=text("true")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    CheckConstraint("retention_days >= 1", name="days_positive"),
)

# An execution retention archived and removed: where its events are (an Arrow/Parquet object, or none
# when its policy does not archive), so replay still answers for it.
execution_archive = Table(
    "execution_archive",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("organization_id", Text, nullable=False),
    Column("execution_id", BigInteger, primary_key=True, autoincrement=False),
    Column("path", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("event_count", BigInteger, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Column("archive_ref", JSONB, nullable=True),
    Column("execution_created_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("archived_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Index(None, "tenant_id", "organization_id", "execution_id"),
)
