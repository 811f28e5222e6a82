"""What an ``event`` row leaves out of its envelope, and how the readers put it back (migrations 0012
and 0018).

Most of an execution's events name their execution again as ``aggregate_id`` (the execution aggregate)
and as ``correlation_id`` (the default correlation), carry the default ``schema_name``
(``noetl.<event_type>``), a ``producer`` that repeats the tenant and organization
(``noetl://tenant/<t>/org/<o>/role/...``) and an ``idempotency_key`` that repeats all three
(``<t>/<o>/<execution>/...``). The row stores NULL for the first three, the producer and the key
relative to what they repeat; every reader of ``event`` rows (the event store, replay's
:func:`noetl_cloud.replay.events.from_row`, so the archive too) rebuilds them:

* ``schema_name``: NULL is the default (the envelope requires a schema name).
* ``aggregate_id``: NULL is the execution id (the envelope requires an aggregate id).
* ``correlation_id`` may itself be absent, so it needs one more form: NULL is the execution id (or no
  correlation when the event has no execution), :data:`ESCAPE` alone is no correlation, and a value
  that starts with :data:`ESCAPE` is stored with one more in front.
* ``producer``: :data:`ESCAPE` then the rest after ``noetl://tenant/<t>/org/<o>/``; a producer that
  does not start so but starts with :data:`ESCAPE` or :data:`LITERAL` is stored after a :data:`LITERAL`.
* ``idempotency_key``: the same, after ``<t>/<o>/<execution id>/`` (an event of an execution). SQL that
  needs the key's text (retention, to digest it) rebuilds it with :data:`KEY_TEXT_SQL`.
* ``stream_id``: the same, after ``execution/<execution id>`` (an execution's own stream is
  :data:`ESCAPE` alone, a frame's ``ESCAPE/stage/<s>/frame/<f>``). SQL that needs the stream's id
  rebuilds it with :data:`STREAM_TEXT_SQL`; :func:`stream_lookup` is how to find a stream's events.
* ``causation_id``: the id of the event that caused this one is almost always an earlier event's
  snowflake a few ids before the row's own: :data:`ESCAPE` then the difference in decimal (``\x011``
  for the event just before). Any other value is kept as it is, after a :data:`LITERAL` when it starts
  with a marker.

The envelope is rebuilt exactly (its checksum verifies); SQL that filters on these columns must
allow for the NULL (nothing in the runtime does: only the readers above select them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_cloud.envelope import default_schema_name

ESCAPE = "\x01"
LITERAL = "\x02"


# The text of a stored key in SQL: ``{k}`` the stored key, ``{t}``, ``{o}``, ``{x}`` the row's tenant,
# organization and execution id (SQL expressions of the caller's code).
KEY_TEXT_SQL = (
    "CASE WHEN left({k}, 1) = chr(1) THEN {t} || '/' || {o} || '/' || CAST({x} AS text) || '/' || substr({k}, 2) "
    "WHEN left({k}, 1) = chr(2) THEN substr({k}, 2) ELSE {k} END"
)
# The id of a stored stream in SQL: ``{s}`` the stored stream id, ``{x}`` the row's execution id.
STREAM_TEXT_SQL = (
    "CASE WHEN left({s}, 1) = chr(1) THEN 'execution/' || CAST({x} AS text) || substr({s}, 2) "
    "WHEN left({s}, 1) = chr(2) THEN substr({s}, 2) ELSE {s} END"
)


def _relative(value: str, prefix: str | None) -> str:
    if prefix is not None and value.startswith(prefix):
        return ESCAPE + value[len(prefix) :]
    return _literal(value)


def _whole(value: str, prefix: str | None) -> str:
    if value[:1] == ESCAPE and prefix is not None:
        return prefix + value[1:]
    return value[1:] if value[:1] == LITERAL else value


def _literal(value: str) -> str:
    return LITERAL + value if value[:1] in (ESCAPE, LITERAL) else value


def stored_causation(causation_id: str | None, event_id: int) -> str | None:
    """The stored form of an event's ``causation_id``."""
    if causation_id is None:
        return None
    if causation_id.isascii() and causation_id.isdigit() and str(int(causation_id)) == causation_id:
        before = event_id - int(causation_id)
        if before >= 0:
            return ESCAPE + str(before)
    return _literal(causation_id)


def _caused_by(stored: str | None, event_id: int) -> str | None:
    if stored is None:
        return None
    if stored[:1] == ESCAPE:
        return str(event_id - int(stored[1:]))
    return stored[1:] if stored[:1] == LITERAL else stored


def stream_prefix(execution_id: str | None) -> str | None:
    """The start of the streams of an execution (``execution/<execution id>``)."""
    return None if execution_id is None else f"execution/{execution_id}"


def stream_lookup(stream_id: str) -> tuple[int | None, str | None, str]:
    """How to find the events of ``stream_id`` as stored: the execution id its name starts with and the
    stored id of that execution's events on it (None, None when the name is not an execution's), and
    the stored id of the events of any other execution or of none (the id whole). A reader matches
    ``(execution_id = x AND stream_id = relative) OR stream_id = whole``."""
    whole = _literal(stream_id)
    head = stream_id.removeprefix("execution/").partition("/")[0]
    if not stream_id.startswith("execution/") or not head.isascii() or not head.isdigit() or str(int(head)) != head:
        return None, None, whole
    return int(head), _stream_relative(stream_id, stream_prefix(head)), whole


def stream_text(stored: str, execution_id: Any) -> str:
    """The id of a stored stream (the row's ``stream_id`` and ``execution_id``)."""
    return _whole(stored, stream_prefix(_execution(execution_id)))


def key_prefix(tenant_id: str, organization_id: str, execution_id: str | None) -> str | None:
    """The start of the idempotency keys of an execution's events (``<t>/<o>/<execution id>/``)."""
    return None if execution_id is None else f"{tenant_id}/{organization_id}/{execution_id}/"


def producer_prefix(tenant_id: str, organization_id: str) -> str:
    """The start of the producers of a tenant's organization (``noetl://tenant/<t>/org/<o>/``)."""
    return f"noetl://tenant/{tenant_id}/org/{organization_id}/"


def _execution(execution_id: Any) -> str | None:
    return None if execution_id is None else str(int(execution_id))  # as the row gives it back


def stored_fields(
    *,
    tenant_id: str,
    organization_id: str,
    event_type: str,
    event_id: int | str,
    execution_id: str | None,
    stream_id: str,
    schema_name: str,
    aggregate_id: str,
    correlation_id: str | None,
    causation_id: str | None,
    producer: str,
    idempotency_key: str | None,
) -> dict[str, str | None]:
    """The stored form of the seven columns."""
    execution = _execution(execution_id)
    key_start = key_prefix(tenant_id, organization_id, execution)
    if correlation_id is None:
        correlation = None if execution is None else ESCAPE
    elif correlation_id == execution:
        correlation = None
    else:
        correlation = ESCAPE + correlation_id if correlation_id.startswith(ESCAPE) else correlation_id
    return {
        "schema_name": None if schema_name == default_schema_name(event_type) else schema_name,
        "aggregate_id": None if execution is not None and aggregate_id == execution else aggregate_id,
        "correlation_id": correlation,
        "producer": _relative(producer, producer_prefix(tenant_id, organization_id)),
        "idempotency_key": None if idempotency_key is None else _relative(idempotency_key, key_start),
        "stream_id": _stream_relative(stream_id, stream_prefix(execution)),
        "causation_id": stored_causation(causation_id, int(event_id)),
    }


def stored_stream(stream_id: str, execution_id: Any) -> str:
    """The stored form of an event's ``stream_id``."""
    return _stream_relative(stream_id, stream_prefix(_execution(execution_id)))


def _stream_relative(stream_id: str, prefix: str | None) -> str:
    # Only the execution's own stream or one under it: "execution/12" is not under "execution/1".
    if prefix is not None and (stream_id == prefix or stream_id.startswith(prefix + "/")):
        return ESCAPE + stream_id[len(prefix) :]
    return _literal(stream_id)


def envelope_fields(row: Mapping[str, Any]) -> dict[str, str | None]:
    """The seven envelope fields of a stored row (a mapping with ``tenant_id``, ``organization_id``,
    ``event_type``, ``event_id``, ``execution_id`` and the seven columns)."""
    execution = _execution(row["execution_id"])
    correlation = row["correlation_id"]
    if correlation is None:
        correlation = execution
    elif correlation == ESCAPE:
        correlation = None
    elif correlation.startswith(ESCAPE):
        correlation = correlation[1:]
    key = row["idempotency_key"]
    return {
        "producer": _whole(row["producer"], producer_prefix(row["tenant_id"], row["organization_id"])),
        "idempotency_key": None
        if key is None
        else _whole(key, key_prefix(row["tenant_id"], row["organization_id"], execution)),
        "schema_name": row["schema_name"] or default_schema_name(row["event_type"]),
        "aggregate_id": row["aggregate_id"] if row["aggregate_id"] is not None else execution,
        "correlation_id": correlation,
        "stream_id": _whole(row["stream_id"], stream_prefix(execution)),
        "causation_id": _caused_by(row["causation_id"], int(row["event_id"])),
    }
