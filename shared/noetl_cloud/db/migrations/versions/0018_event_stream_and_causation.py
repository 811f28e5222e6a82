"""An event row's stream id and causation id without what they repeat (issue #26, bytes per execution).

* ``event.stream_id`` of an execution's event names that execution again: ``execution/<id>`` (29
  bytes) on every event of its own stream, ``execution/<id>/stage/<s>/frame/<f>`` on a frame's. It is
  stored after ``execution/<id>``, behind ``chr(1)``: one byte for the execution's own stream.
* ``event.causation_id`` is almost always the snowflake of an earlier event a few ids before the row's
  own: it is stored as ``chr(1)`` then the difference in decimal (``chr(1) || '1'`` for the event just
  before), 3 bytes instead of 20.

Any other value is kept whole, after ``chr(2)`` when it starts with one of the two markers, as migration
0012 did for the producer and the idempotency key; the readers rebuild both
(``noetl_cloud.eventlog.stored``), so every envelope and its checksum are unchanged. About 950 bytes less
per 3-step execution (28 events, 19 with a cause).

Both directions rewrite every partition of ``event`` (one ``ALTER ... TYPE ... USING``, as 0012): on a
large database run it in a maintenance window.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# noetl_cloud.eventlog.stored's ESCAPE and LITERAL, stream_prefix() and a canonical decimal id, as SQL.
_ESCAPE = "chr(1)"
_LITERAL = "chr(2)"
_STREAM = "('execution/' || execution_id::text)"
_CANONICAL = "'^(0|[1-9][0-9]*)$'"


def upgrade() -> None:
    op.execute(
        f"ALTER TABLE event ALTER COLUMN stream_id TYPE text USING CASE WHEN execution_id IS NOT NULL AND "
        f"(stream_id = {_STREAM} OR starts_with(stream_id, {_STREAM} || '/')) "
        f"THEN {_ESCAPE} || substr(stream_id, length({_STREAM}) + 1) "
        f"WHEN left(stream_id, 1) IN ({_ESCAPE}, {_LITERAL}) THEN {_LITERAL} || stream_id ELSE stream_id END, "
        f"ALTER COLUMN causation_id TYPE text USING CASE WHEN causation_id ~ {_CANONICAL} "
        "AND CAST(causation_id AS numeric) <= event_id "
        f"THEN {_ESCAPE} || CAST(event_id - CAST(causation_id AS numeric) AS text) "
        f"WHEN left(causation_id, 1) IN ({_ESCAPE}, {_LITERAL}) THEN {_LITERAL} || causation_id ELSE causation_id END"
    )


def downgrade() -> None:
    op.execute(
        f"ALTER TABLE event ALTER COLUMN stream_id TYPE text USING CASE WHEN left(stream_id, 1) = {_ESCAPE} "
        f"THEN {_STREAM} || substr(stream_id, 2) WHEN left(stream_id, 1) = {_LITERAL} THEN substr(stream_id, 2) "
        "ELSE stream_id END, "
        f"ALTER COLUMN causation_id TYPE text USING CASE WHEN left(causation_id, 1) = {_ESCAPE} "
        "THEN CAST(event_id - CAST(substr(causation_id, 2) AS numeric) AS text) "
        f"WHEN left(causation_id, 1) = {_LITERAL} THEN substr(causation_id, 2) ELSE causation_id END"
    )
