"""The SQL of replay and projection: reading an execution's events in store order, the projection's
tracking row and surface rows (snapshots: :mod:`noetl_cloud.replay.snapshot_store`). Every read names
the tenant and the organization: they scope every query.

The tracking row (``projection_tracking``) is the projection's commit point: the position of the
last event folded, how many were folded and with what registry digest and reducer version. Surface
rows (``projection``) are written only when a fold changes them, so each carries the event count it
was last written at (``version`` <= the tracking row's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, text

from noetl_cloud.db.bulk import InsertBatch
from noetl_cloud.db.schema import projection, projection_tracking
from noetl_cloud.envelope import canonical_json
from noetl_cloud.replay.events import from_row
from noetl_cloud.replay.state import LINEAGE, SURFACES, ReplayState, surface_checksum
from noetl_cloud.replay.upcasters import Event

_EVENT_COLUMNS = (
    "position, event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_id, "
    "aggregate_type, event_type, schema_name, schema_version, event_time, ingest_time, producer, causation_id, "
    "correlation_id, idempotency_key, payload, payload_ref, meta"
)
_SCOPE = "tenant_id = :t AND organization_id = :o AND execution_id = :e"

_READ = text(
    f"SELECT {_EVENT_COLUMNS} FROM event WHERE {_SCOPE} AND position > :after AND position <= :upto ORDER BY position"
)
_COUNT_UPTO = text(f"SELECT count(*) FROM event WHERE {_SCOPE} AND position <= :upto")
_TIP = text(f"SELECT count(*) AS n, max(position) AS tip FROM event WHERE {_SCOPE}")
_EVENT_POSITION = text(f"SELECT position FROM event WHERE {_SCOPE} AND event_id = :id")
_TIME_POSITION = text(f"SELECT max(position) FROM event WHERE {_SCOPE} AND ingest_time <= :at")
_CHECKSUMS = text(f"SELECT projection_type, checksum FROM projection WHERE {_SCOPE}")
_SURFACES = text(
    "SELECT projection_type, version, state, upcaster_registry_digest, reducer_version FROM projection "
    f"WHERE {_SCOPE} AND projection_type = ANY(:kinds)"
)
_HEADERS = text(
    f"SELECT projection_type, version, upcaster_registry_digest, reducer_version FROM projection WHERE {_SCOPE}"
)
_TRACKING_COLUMNS = (
    "version, position, last_event_id, upcaster_registry_digest, reducer_version, lag_ms, projected_at, row_kinds"
)
_TRACKING = text(f"SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {_SCOPE}")
_TRACKING_LOCKED = text(f"SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {_SCOPE} FOR UPDATE")
# A fold's lock and read in one statement: the tracking row locked (FOR UPDATE returns its latest committed
# version, whatever the statement's snapshot) and the events after its position, in store order.
_LOCK_AND_READ = text(
    f"WITH t AS (SELECT {_TRACKING_COLUMNS} FROM projection_tracking WHERE {_SCOPE} FOR UPDATE) "
    "SELECT t.version AS t_version, t.position AS t_position, t.last_event_id AS t_last_event_id, "
    "t.upcaster_registry_digest AS t_digest, t.reducer_version AS t_reducer_version, t.lag_ms AS t_lag_ms, "
    "t.projected_at AS t_projected_at, t.row_kinds AS t_row_kinds, e.* FROM t LEFT JOIN LATERAL ("
    f"  SELECT {_EVENT_COLUMNS} FROM event WHERE {_SCOPE} AND position > t.position"
    ") e ON TRUE ORDER BY e.position"
)
# A delivery's first read: the event's scope and position with its execution's tracking row, if any (a
# duplicate's one statement; no projection state). Kept to these two lookups by key: a join with the
# execution's events would be planned across every event partition on each delivery (2-10 ms).
EVENT_AND_TRACKING = text(
    "SELECT d.position AS d_position, d.tenant_id AS d_tenant_id, d.organization_id AS d_organization_id, "
    "d.execution_id AS d_execution_id, d.stream_id AS d_stream_id, "
    "t.version AS t_version, t.position AS t_position, t.last_event_id AS t_last_event_id, "
    "t.upcaster_registry_digest AS t_digest, t.reducer_version AS t_reducer_version, t.lag_ms AS t_lag_ms, "
    "t.projected_at AS t_projected_at, t.row_kinds AS t_row_kinds "
    "FROM event d LEFT JOIN projection_tracking t ON t.tenant_id = d.tenant_id "
    "AND t.organization_id = d.organization_id AND t.execution_id = d.execution_id WHERE d.event_id = :id"
)
_TRACKING_UPSERT_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id) DO UPDATE SET "
    "version = EXCLUDED.version, position = EXCLUDED.position, last_event_id = EXCLUDED.last_event_id, "
    "upcaster_registry_digest = EXCLUDED.upcaster_registry_digest, reducer_version = EXCLUDED.reducer_version, "
    "event_time_watermark = EXCLUDED.event_time_watermark, lag_ms = EXCLUDED.lag_ms, "
    "projected_at = EXCLUDED.projected_at, row_kinds = EXCLUDED.row_kinds "
    "WHERE projection_tracking.version < EXCLUDED.version "
    "OR projection_tracking.upcaster_registry_digest <> EXCLUDED.upcaster_registry_digest "
    "OR projection_tracking.reducer_version <> EXCLUDED.reducer_version "
    # a refold at the same version (the same events) lists the kinds it stored
    "OR (projection_tracking.version = EXCLUDED.version "
    "AND projection_tracking.row_kinds IS DISTINCT FROM EXCLUDED.row_kinds)"
)
# A fold that read the tracking row without locking it writes only if that row is still what it read (or,
# for a first fold, if there is none): the tracking row is written first and the surface rows only with it.
_TRACKING_IF_UNCHANGED_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id) DO UPDATE SET "
    "version = EXCLUDED.version, position = EXCLUDED.position, last_event_id = EXCLUDED.last_event_id, "
    "event_time_watermark = EXCLUDED.event_time_watermark, lag_ms = EXCLUDED.lag_ms, "
    "projected_at = EXCLUDED.projected_at, row_kinds = EXCLUDED.row_kinds "
    "WHERE projection_tracking.version = CAST(:expected_version AS bigint) "
    "AND projection_tracking.position = CAST(:expected_position AS bigint) "
    "AND projection_tracking.upcaster_registry_digest = EXCLUDED.upcaster_registry_digest "
    "AND projection_tracking.reducer_version = EXCLUDED.reducer_version "
)
_TRACKING_IF_NONE_SUFFIX = "ON CONFLICT (tenant_id, organization_id, execution_id) DO NOTHING"
_DELETE_OTHER_KINDS = (
    "DELETE FROM projection WHERE tenant_id = :t AND organization_id = :o AND execution_id = :e "
    "AND NOT (projection_type = ANY(CAST(:keep AS text[])))"
)
#: Every row kind of a projection: the surfaces and the lineage.
KINDS = (*SURFACES, LINEAGE)
_UPSERT_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id, projection_type) DO UPDATE SET "
    "version = EXCLUDED.version, state = EXCLUDED.state, checksum = EXCLUDED.checksum, "
    "upcaster_registry_digest = EXCLUDED.upcaster_registry_digest, reducer_version = EXCLUDED.reducer_version "
    "WHERE projection.version < EXCLUDED.version "
    "OR projection.upcaster_registry_digest <> EXCLUDED.upcaster_registry_digest "
    "OR projection.reducer_version <> EXCLUDED.reducer_version"
)
MAX_POSITION = 2**63 - 1


def _scope(tenant_id: str, organization_id: str, execution_id: str | int) -> dict[str, Any]:
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
    params = {**_scope(tenant_id, organization_id, execution_id), "after": after, "upto": upto}
    return [from_row(r._mapping) for r in conn.execute(_READ, params)]


def count_upto(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, upto: int) -> int:
    params = {**_scope(tenant_id, organization_id, execution_id), "upto": upto}
    return int(conn.execute(_COUNT_UPTO, params).scalar_one())


def tip(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int) -> tuple[int, int]:
    """``(event count, last position)`` of the execution in this scope; ``(0, 0)`` when it has none."""
    row = conn.execute(_TIP, _scope(tenant_id, organization_id, execution_id)).one()
    return int(row.n), int(row.tip or 0)


def event_position(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, event_id: int
) -> int | None:
    params = {**_scope(tenant_id, organization_id, execution_id), "id": event_id}
    found = conn.execute(_EVENT_POSITION, params).scalar()
    return None if found is None else int(found)


def time_position(conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, at: datetime) -> int:
    """The last position stored at or before ``at`` (by ingest time); 0 when none was."""
    params = {**_scope(tenant_id, organization_id, execution_id), "at": at}
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
    return tracking_of(conn.execute(statement, _scope(tenant_id, organization_id, execution_id)).first())


def lock_and_read(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int
) -> tuple[Tracking, list[Event]] | None:
    """Lock the tracking row and read the events after its position, in one statement; None when there
    is no tracking row (nothing locked)."""
    rows = conn.execute(_LOCK_AND_READ, _scope(tenant_id, organization_id, execution_id)).all()
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
        stream_id=first.d_stream_id,
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


def rows_consistent(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    tracking: Tracking,
) -> bool:
    """A row for every kind the tracking row lists and for no other, none ahead of the tracking row, all
    folded with its digest and version (read without the rows' state)."""
    rows = conn.execute(_HEADERS, _scope(tenant_id, organization_id, execution_id)).all()
    return {r.projection_type for r in rows} == tracking.row_kinds and all(
        int(r.version) <= tracking.version and tracking.folded_with(r.upcaster_registry_digest, r.reducer_version)
        for r in rows
    )


def load_state(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    tracking: Tracking,
    kinds: Iterable[str],
) -> ReplayState | None:
    """The state with only the row kinds ``kinds`` loaded (the others left empty: the caller folds only
    events that do not touch them; a kind the tracking row lists no row for is the empty surface); None
    when a row it lists is missing or was folded otherwise."""
    wanted = sorted(set(kinds) & tracking.row_kinds)
    params = {**_scope(tenant_id, organization_id, execution_id), "kinds": wanted}
    rows = {r.projection_type: r for r in conn.execute(_SURFACES, params)} if wanted else {}
    if set(rows) != set(wanted) or not all(
        int(r.version) <= tracking.version and tracking.folded_with(r.upcaster_registry_digest, r.reducer_version)
        for r in rows.values()
    ):
        return None
    return ReplayState.from_parts(
        {name: rows[name].state for name in SURFACES if name in rows},
        rows[LINEAGE].state if LINEAGE in rows else [],
        event_count=tracking.version,
        last_event_id=tracking.last_event_id,
        last_position=tracking.position,
    )


def live_checksums(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, tracking: Tracking | None
) -> dict[str, str]:
    """Each surface's live checksum (what ``verify`` compares with a fresh fold): its stored row's, or
    the empty surface's for a kind the tracking row lists no row for (none without a tracking row)."""
    rows = conn.execute(_CHECKSUMS, _scope(tenant_id, organization_id, execution_id)).all()
    stored = {r.projection_type: r.checksum for r in rows if r.projection_type in SURFACES}
    if tracking is None:
        return stored
    empty = surface_checksum([])
    return {
        **{name: empty for name in SURFACES if name not in tracking.row_kinds},
        **{name: value for name, value in stored.items() if name in tracking.row_kinds},
    }


def save_projection(
    conn: Connection,
    state: ReplayState,
    *,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    registry_digest: str,
    reducer_version: int,
    watermark: datetime | None,
    lag_ms: int | None,
    projected_at: datetime,
    kinds: Iterable[str] = KINDS,
    stored: frozenset[str] | None = None,
    unless_changed: Tracking | Literal[False] | None = False,
) -> list[str] | None:
    """Upsert the row kinds ``kinds`` of the execution's projection (by default all) and its tracking
    row, in one statement; a row already at a higher version is kept (version-monotonic). The kinds
    written, in :data:`KINDS` order.

    A kind whose surface is empty gets no row unless it has one (``stored``: the kinds with a row
    before this fold, as its tracking row listed them). ``stored=None``: a fold from the first event;
    the rows of the kinds it does not write are deleted. The tracking row lists the kinds with a row.

    ``unless_changed``: the tracking row the fold started from, read without a lock (None: there was
    none). The rows are written only if the tracking row is still that one; None when it was not
    (nothing written: another fold committed meanwhile)."""
    key = {"tenant_id": tenant_id, "organization_id": organization_id, "execution_id": int(execution_id)}
    common = {
        **key,
        "version": state.event_count,
        "upcaster_registry_digest": registry_digest,
        "reducer_version": reducer_version,
    }
    before = stored or frozenset()
    wanted = set(kinds)
    surfaces = [name for name in SURFACES if name in wanted and (state.surfaces[name] or name in before)]
    checksums = state.surface_checksums(surfaces)
    rows = [
        {**common, "projection_type": name, "state": state.rows(name), "checksum": checksums[name]} for name in surfaces
    ]
    written = list(surfaces)
    if LINEAGE in wanted and (state.payload_refs or LINEAGE in before):
        lineage = state.lineage()
        rows.append({**common, "projection_type": LINEAGE, "state": lineage, "checksum": _lineage_checksum(lineage)})
        written.append(LINEAGE)
    row_kinds = [kind for kind in KINDS if kind in before or kind in written]
    tracking = {
        **common,
        "position": state.last_position,
        "last_event_id": None if state.last_event_id is None else int(state.last_event_id),
        "event_time_watermark": watermark,
        "lag_ms": lag_ms,
        "projected_at": projected_at,
        "row_kinds": row_kinds,
    }
    batch = InsertBatch()  # the surface rows and the tracking row in one statement
    if unless_changed is False:
        if stored is None:  # a refold: rows of kinds now empty (folded otherwise) go
            scope = _scope(tenant_id, organization_id, execution_id)
            batch.statement(_DELETE_OTHER_KINDS, {**scope, "keep": row_kinds})
        batch.insert(projection, rows, suffix=_UPSERT_SUFFIX)
        batch.insert(projection_tracking, [tracking], suffix=_TRACKING_UPSERT_SUFFIX)
        batch.execute(conn)
        return written
    expected: dict[str, Any] = {}
    if unless_changed is None:
        suffix = _TRACKING_IF_NONE_SUFFIX
    else:
        suffix = _TRACKING_IF_UNCHANGED_SUFFIX
        expected = {"expected_version": unless_changed.version, "expected_position": unless_changed.position}
    tracked = batch.insert(projection_tracking, [tracking], suffix=suffix, returning=("execution_id",))
    batch.insert(projection, rows, suffix=_UPSERT_SUFFIX, only_with=(tracked, "execution_id"))
    batch.execute(conn, params=expected)
    return written if tracked.returned else None


def _lineage_checksum(rows: list[dict[str, Any]]) -> str:
    from noetl_cloud.envelope import sha256_hex

    return sha256_hex(canonical_json(rows))
