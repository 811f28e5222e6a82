"""What an ``event`` row leaves out of its envelope, and how the readers put it back (migration 0012).

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


def _relative(value: str, prefix: str | None) -> str:
    if prefix is not None and value.startswith(prefix):
        return ESCAPE + value[len(prefix) :]
    return LITERAL + value if value[:1] in (ESCAPE, LITERAL) else value


def _whole(value: str, prefix: str | None) -> str:
    if value[:1] == ESCAPE and prefix is not None:
        return prefix + value[1:]
    return value[1:] if value[:1] == LITERAL else value


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
    execution_id: str | None,
    schema_name: str,
    aggregate_id: str,
    correlation_id: str | None,
    producer: str,
    idempotency_key: str | None,
) -> dict[str, str | None]:
    """The stored form of the five columns."""
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
    }


def envelope_fields(row: Mapping[str, Any]) -> dict[str, str | None]:
    """The five envelope fields of a stored row (a mapping with ``tenant_id``, ``organization_id``,
    ``event_type``, ``execution_id`` and the five columns)."""
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
    }
