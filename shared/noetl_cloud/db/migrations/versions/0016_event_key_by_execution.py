"""Idempotency keys led by their execution (issue #26, start throughput as the log grows).

``event_key.key_digest`` of a key of an execution becomes the execution id (8 bytes, big-endian)
followed by the first 8 bytes of the key's SHA-256, instead of the first 16 bytes of the SHA-256
(``noetl_cloud.eventlog.keys``); the keys of events of no execution keep their digest. A key is then
unique within its execution, and the index's inserts follow the execution ids, which grow with time:
a start's keys land on its newest pages, where a digest alone sent every insert to a random leaf (at
300,000 executions, 6.1 million keys, 553 MB of index against 256 MB of shared buffers, the insert
into ``event_key`` took eight times as long as on an empty database). The row stays 16 bytes.

Both directions rebuild the table from ``event`` (each key's text is rebuilt from its event, as
retention does), in one pass joined by ``event_id``; on a large database run it in a maintenance
window. A key whose event is gone (none should be) keeps its digest.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# noetl_cloud.eventlog.stored.KEY_TEXT_SQL and the digests of noetl_cloud.eventlog.keys, as of this revision.
_TEXT = (
    "CASE WHEN left(e.idempotency_key, 1) = chr(1) THEN e.tenant_id || '/' || e.organization_id || '/' || "
    "e.execution_id::text || '/' || substring(e.idempotency_key FROM 2) "
    "WHEN left(e.idempotency_key, 1) = chr(2) THEN substring(e.idempotency_key FROM 2) "
    "ELSE e.idempotency_key END"
)
_SHA = f"sha256(convert_to({_TEXT}, 'UTF8'))"
_WHOLE = f"CAST(encode(substring({_SHA} FROM 1 FOR 16), 'hex') AS uuid)"
_LED = f"CAST(lpad(to_hex(e.execution_id), 16, '0') || encode(substring({_SHA} FROM 1 FOR 8), 'hex') AS uuid)"


def _rebuild(digest: str) -> None:
    op.create_table(
        "event_key_next",
        sa.Column("key_digest", UUID(as_uuid=True), nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("key_digest", name="pk_event_key_next"),
    )
    op.execute(
        "INSERT INTO event_key_next (key_digest, event_id) "
        f"SELECT CASE WHEN COALESCE(e.execution_id, 0) = 0 OR e.idempotency_key IS NULL THEN k.key_digest "
        f"ELSE {digest} END, k.event_id FROM event_key k LEFT JOIN event e ON e.event_id = k.event_id "
        "ORDER BY 1"
    )
    op.drop_table("event_key")
    op.rename_table("event_key_next", "event_key")
    op.execute("ALTER TABLE event_key RENAME CONSTRAINT pk_event_key_next TO pk_event_key")


def upgrade() -> None:
    _rebuild(_LED)


def downgrade() -> None:
    _rebuild(_WHOLE)
