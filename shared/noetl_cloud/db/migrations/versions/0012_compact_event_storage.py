"""Narrower event storage (issue #26, bytes per execution).

* ``event_key`` keeps a 16-byte digest of each idempotency key (``key_digest uuid``, the first 128 bits
  of the key's SHA-256) instead of the key's text: its row and its primary key's entry no longer grow
  with the key (keys are about 70 characters). The event row keeps the key's text (it is sealed into
  the envelope's checksum), so the downgrade rebuilds the text keys from the events.
* ``event.envelope_checksum`` is stored as its 32 bytes (``bytea``) instead of 64 hex characters; the
  readers hand it out as hex again, the archive keeps hex.
* ``event.schema_name`` is NULL when it is the default, ``noetl.<event_type>`` (every event the runtime
  writes), ``aggregate_id`` when it is the execution id, ``correlation_id`` when it is the execution id
  (no correlation becomes ``chr(1)``), and ``producer`` is stored after its tenant and organization's
  ``noetl://tenant/<t>/org/<o>/`` (``chr(1)`` in front), ``idempotency_key`` after its execution's
  ``<t>/<o>/<execution id>/``: the readers rebuild them (``noetl_cloud.eventlog.stored``).

Both rewrite their tables (``ALTER ... TYPE`` rewrites every partition of ``event``): on a large
database run it in a maintenance window.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# noetl_cloud.eventlog.stored's ESCAPE, LITERAL and producer_prefix(), as SQL.
_ESCAPE = "chr(1)"
_LITERAL = "chr(2)"
_PREFIX = "('noetl://tenant/' || tenant_id || '/org/' || organization_id || '/')"
_KEY_PREFIX = "(tenant_id || '/' || organization_id || '/' || execution_id::text || '/')"
# noetl_cloud.eventlog.keys.KEY_DIGEST_SQL, as of this revision.
_DIGEST = "CAST(encode(substring(sha256(convert_to({}, 'UTF8')) FROM 1 FOR 16), 'hex') AS uuid)"


def upgrade() -> None:
    op.create_table(
        "event_key_digest",
        sa.Column("key_digest", UUID(as_uuid=True), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("key_digest", name="pk_event_key_digest"),
    )
    op.execute(
        f"INSERT INTO event_key_digest (key_digest, event_id) SELECT {_DIGEST.format('idempotency_key')}, event_id "
        "FROM event_key ON CONFLICT DO NOTHING"
    )
    op.drop_table("event_key")
    op.rename_table("event_key_digest", "event_key")
    op.execute("ALTER TABLE event_key RENAME CONSTRAINT pk_event_key_digest TO pk_event_key")
    # One rewrite of every partition for all the columns. A checksum the store wrote is 64 lower-case hex
    # digits; anything else keeps its bytes (the upgrade never fails on a row).
    op.alter_column("event", "schema_name", nullable=True)
    op.alter_column("event", "aggregate_id", nullable=True)
    op.execute(
        "ALTER TABLE event ALTER COLUMN envelope_checksum TYPE bytea USING CASE WHEN envelope_checksum ~ "
        "'^([0-9a-f]{2})*$' THEN decode(envelope_checksum, 'hex') ELSE convert_to(envelope_checksum, 'UTF8') END, "
        "ALTER COLUMN schema_name TYPE text USING NULLIF(schema_name, 'noetl.' || event_type), "
        "ALTER COLUMN aggregate_id TYPE text USING CASE WHEN aggregate_id = execution_id::text THEN NULL "
        "ELSE aggregate_id END, "
        f"ALTER COLUMN correlation_id TYPE text USING CASE WHEN correlation_id IS NULL AND execution_id IS NOT NULL "
        f"THEN {_ESCAPE} WHEN correlation_id = execution_id::text THEN NULL WHEN left(correlation_id, 1) = {_ESCAPE} "
        f"THEN {_ESCAPE} || correlation_id ELSE correlation_id END, "
        f"ALTER COLUMN producer TYPE text USING CASE WHEN starts_with(producer, {_PREFIX}) "
        f"THEN {_ESCAPE} || substr(producer, length({_PREFIX}) + 1) "
        f"WHEN left(producer, 1) IN ({_ESCAPE}, {_LITERAL}) THEN {_LITERAL} || producer ELSE producer END, "
        f"ALTER COLUMN idempotency_key TYPE text USING CASE WHEN execution_id IS NOT NULL AND "
        f"starts_with(idempotency_key, {_KEY_PREFIX}) "
        f"THEN {_ESCAPE} || substr(idempotency_key, length({_KEY_PREFIX}) + 1) "
        f"WHEN left(idempotency_key, 1) IN ({_ESCAPE}, {_LITERAL}) THEN {_LITERAL} || idempotency_key "
        "ELSE idempotency_key END"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE event ALTER COLUMN envelope_checksum TYPE text USING encode(envelope_checksum, 'hex'), "
        "ALTER COLUMN schema_name TYPE text USING coalesce(schema_name, 'noetl.' || event_type), "
        "ALTER COLUMN aggregate_id TYPE text USING coalesce(aggregate_id, execution_id::text), "
        f"ALTER COLUMN correlation_id TYPE text USING CASE WHEN correlation_id IS NULL THEN execution_id::text "
        f"WHEN correlation_id = {_ESCAPE} THEN NULL WHEN left(correlation_id, 1) = {_ESCAPE} "
        "THEN substr(correlation_id, 2) ELSE correlation_id END, "
        f"ALTER COLUMN producer TYPE text USING CASE WHEN left(producer, 1) = {_ESCAPE} "
        f"THEN {_PREFIX} || substr(producer, 2) WHEN left(producer, 1) = {_LITERAL} THEN substr(producer, 2) "
        "ELSE producer END, "
        f"ALTER COLUMN idempotency_key TYPE text USING CASE WHEN left(idempotency_key, 1) = {_ESCAPE} "
        f"THEN {_KEY_PREFIX} || substr(idempotency_key, 2) WHEN left(idempotency_key, 1) = {_LITERAL} "
        "THEN substr(idempotency_key, 2) ELSE idempotency_key END"
    )
    op.alter_column("event", "schema_name", nullable=False)
    op.alter_column("event", "aggregate_id", nullable=False)
    op.create_table(
        "event_key_text",
        sa.Column("idempotency_key", sa.Text, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("idempotency_key", name="pk_event_key_text"),
    )
    op.execute(
        "INSERT INTO event_key_text (idempotency_key, event_id) SELECT e.idempotency_key, k.event_id "
        "FROM event_key k JOIN event e ON e.event_id = k.event_id WHERE e.idempotency_key IS NOT NULL "
        "ON CONFLICT DO NOTHING"
    )
    op.drop_table("event_key")
    op.rename_table("event_key_text", "event_key")
    op.execute("ALTER TABLE event_key RENAME CONSTRAINT pk_event_key_text TO pk_event_key")
