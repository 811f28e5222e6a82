"""The SQL of replay and projection: reading an execution's events in store order and the projection's
tracking row (its surface rows: :mod:`noetl_cloud.replay.projection_rows`; snapshots:
:mod:`noetl_cloud.replay.snapshot_store`). Every read names the tenant and the organization: they
scope every query.

The tracking row (``projection_tracking``) is the projection's commit point: the position of the
last event folded, how many were folded and with what registry digest and reducer version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.eventlog.stored import stream_text
from noetl_cloud.replay.events import from_row
from noetl_cloud.replay.state import LINEAGE, SURFACES
from noetl_cloud.replay.upcasters import Event

_EVENT_COLUMNS = (
    "position, event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_id, "
    "aggregate_type, event_type, schema_name, schema_version, event_time, ingest_time, producer, causation_id, "
    "correlation_id, idempotency_key, payload, payload_ref, meta"
)
SCOPE = "tenant_id = :t AND organization_id = :o AND execution_id = :e"

_READ = text(
    f"SELECT {_EVENT_COLUMNS} FROM event WHERE {SCOPE} AND position > :after AND position <= :upto ORDER BY position"
)
_COUNT_UPTO = text(f"SELECT count(*) FROM event WHERE {SCOPE} AND position <= :upto")
_TIP = text(f"SELECT count(*) AS n, max(position) AS tip FROM event WHERE {SCOPE}")
_EVENT_POSITION = text(f"SELECT position FROM event WHERE {SCOPE} AND event_id = :id")
_TIME_POSITION = text(f"SELECT max(position) FROM event WHERE {SCOPE} AND ingest_time <= :at")
#: The registry digest of a tracking or projection row, stored as its bytes (migration 0017), read as hex.
DIGEST_HEX = "encode(upcaster_registry_digest, 'hex') AS upcaster_registry_digest"
_TRACKING_COLUMNS = f"version, position, last_event_id, {DIGEST_HEX}, reducer_version, lag_ms, projected_at, row_kinds"
_TRACKING = text(f"SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {SCOPE}")
_TRACKING_LOCKED = text(f"SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {SCOPE} FOR UPDATE")
# A fold's lock and read in one statement: the tracking row locked (FOR UPDATE returns its latest committed
# version, whatever the statement's snapshot) and the events after its position, in store order.
_LOCK_AND_READ = text(
    f"WITH t AS (SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {SCOPE} FOR UPDATE) "
    "SELECT t.version AS t_version, t.position AS t_position, t.last_event_id AS t_last_event_id, "
    "t.upcaster_registry_digest AS t_digest, t.reducer_version AS t_reducer_version, t.lag_ms AS t_lag_ms, "
    "t.projected_at AS t_projected_at, t.row_kinds AS t_row_kinds, e.* FROM t LEFT JOIN LATERAL ("
    f"  SELECT {_EVENT_COLUMNS} FROM event WHERE {SCOPE} AND position > t.position"
    ") e ON TRUE ORDER BY e.position"
)
# A delivery's first read: the event's scope and position with its execution's tracking row, if any (a
# duplicate's one statement; no projection state). Kept to these two lookups by key: a join with the
# execution's events would be planned across every event partition on each delivery (2-10 ms).
EVENT_AND_TRACKING = text(
    "SELECT d.position AS d_position, d.tenant_id AS d_tenant_id, d.organization_id AS d_organization_id, "
    "d.execution_id AS d_execution_id, d.stream_id AS d_stream_id, "
    "t.version AS t_version, t.position AS t_position, t.last_event_id AS t_last_event_id, "
    "encode(t.upcaster_registry_digest, 'hex') AS t_digest, t.reducer_version AS t_reducer_version, "
    "t.lag_ms AS t_lag_ms, t.projected_at AS t_projected_at, t.row_kinds AS t_row_kinds "
    "FROM event d LEFT JOIN projection_tracking t ON t.tenant_id = d.tenant_id "
    "AND t.organization_id = d.organization_id AND t.execution_id = d.execution_id WHERE d.event_id = :id"
)
#: Every row kind of a projection: the surfaces and the lineage.
KINDS = (*SURFACES, LINEAGE)
MAX_POSITION = 2**63 - 1


def scope_params(tenant_id: str, organization_id: str, execution_id: str | int) -> dict[str, Any]:
    return {"t": tenant_id, "o": organization_id, "e": int(execution_id)}


def read_events(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    *,
    after: int = 0,
    upto: int = MAX_POSITION,
) -> list[Event]:
    """The execution's events with ``after < position <= upto``, in store order."""
    params = {**scope_params(tenant_id, organization_id, execution_id), "after": after, "upto": upto}
    return [from_row(r._mapping) for r in conn.execute(_READ, params)]


def count_upto(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, upto: int) -> int:
    params = {**scope_params(tenant_id, organization_id, execution_id), "upto": upto}
    return int(conn.execute(_COUNT_UPTO, params).scalar_one())


def tip(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int) -> tuple[int, int]:
    """``(event count, last position)`` of the execution in this scope; ``(0, 0)`` when it has none."""
    row = conn.execute(_TIP, scope_params(tenant_id, organization_id, execution_id)).one()
    return int(row.n), int(row.tip or 0)


def event_position(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, event_id: int
) -> int | None:
    params = {**scope_params(tenant_id, organization_id, execution_id), "id": event_id}
    found = conn.execute(_EVENT_POSITION, params).scalar()
    return None if found is None else int(found)


def time_position(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, at: datetime) -> int:
    """The last position stored at or before ``at`` (by ingest time); 0 when none was."""
    params = {**scope_params(tenant_id, organization_id, execution_id), "at": at}
    return int(conn.execute(_TIME_POSITION, params).scalar() or 0)


@dataclass(frozen=True)
class Tracking:
    """The tracking row of one execution's projection."""

    version: int  # events folded
    position: int  # store position of the last event folded
    last_event_id: str | None
    registry_digest: str
    reducer_version: int
    lag_ms: int | None
    projected_at: datetime
    row_kinds: frozenset[str] = frozenset()  # the kinds with a projection row; the others are empty surfaces

    def folded_with(self, registry_digest: str, reducer_version: int) -> bool:
        return self.registry_digest == registry_digest and self.reducer_version == reducer_version

    def summary(self) -> dict[str, Any]:
        return {
            "exists": True,
            "version": self.version,
            "position": self.position,
            "last_event_id": self.last_event_id,
            "lag_ms": self.lag_ms,
            "projected_at": self.projected_at.isoformat(),
        }


def load_tracking(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, *, lock: bool = False
) -> Tracking | None:
    """The tracking row alone (no surface state); ``lock``: ``FOR UPDATE`` (the latest committed one)."""
    statement = _TRACKING_LOCKED if lock else _TRACKING
    return tracking_of(conn.execute(statement, scope_params(tenant_id, organization_id, execution_id)).first())


def lock_and_read(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int
) -> tuple[Tracking, list[Event]] | None:
    """Lock the tracking row and read the events after its position, in one statement; None when there
    is no tracking row (nothing locked)."""
    rows = conn.execute(_LOCK_AND_READ, scope_params(tenant_id, organization_id, execution_id)).all()
    if not rows:
        return None
    tracking = _prefixed_tracking(rows[0])
    assert tracking is not None
    return tracking, [from_row(r._mapping) for r in rows if r.event_id is not None]


@dataclass(frozen=True)
class Delivery:
    """A delivery's first read: the delivered event's scope and position, and the execution's tracking row."""

    position: int
    tenant_id: str
    organization_id: str
    execution_id: str | None
    stream_id: str
    tracking: Tracking | None


def delivery(conn: Connection, event_id: int) -> Delivery | None:
    """What :data:`EVENT_AND_TRACKING` answers for ``event_id``; None when the log has no such event."""
    first = conn.execute(EVENT_AND_TRACKING, {"id": event_id}).first()
    if first is None:
        return None
    return Delivery(
        position=int(first.d_position),
        tenant_id=first.d_tenant_id,
        organization_id=first.d_organization_id,
        execution_id=None if first.d_execution_id is None else str(first.d_execution_id),
        stream_id=stream_text(first.d_stream_id, first.d_execution_id),
        tracking=_prefixed_tracking(first),
    )


def _prefixed_tracking(r: Any) -> Tracking | None:
    """The ``t_``-prefixed tracking columns of a row (None when they are null: no tracking row)."""
    if r.t_version is None:
        return None
    return Tracking(
        version=int(r.t_version),
        position=int(r.t_position),
        last_event_id=None if r.t_last_event_id is None else str(r.t_last_event_id),
        registry_digest=r.t_digest,
        reducer_version=int(r.t_reducer_version),
        lag_ms=r.t_lag_ms,
        projected_at=r.t_projected_at,
        row_kinds=_row_kinds(r.t_row_kinds),
    )


def _row_kinds(value: Any) -> frozenset[str]:
    """The ``row_kinds`` column: NULL (a tracking row written before migration 0013) is every kind."""
    return frozenset(KINDS) if value is None else frozenset(value)


def tracking_of(r: Any) -> Tracking | None:
    """The tracking columns of a row (None when they are null: no tracking row)."""
    if r is None or r.version is None:
        return None
    return Tracking(
        version=int(r.version),
        position=int(r.position),
        last_event_id=None if r.last_event_id is None else str(r.last_event_id),
        registry_digest=r.upcaster_registry_digest,
        reducer_version=int(r.reducer_version),
        lag_ms=r.lag_ms,
        projected_at=r.projected_at,
        row_kinds=_row_kinds(r.row_kinds),
    )
