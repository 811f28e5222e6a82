"""The SQL of replay and projection: reading an execution's events in store order, projection rows
and snapshots. Every read names the tenant and the organization: they scope every query.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.db.bulk import insert_rows
from noetl_cloud.db.schema import projection, projection_snapshot
from noetl_cloud.envelope import canonical_json
from noetl_cloud.replay.events import from_row
from noetl_cloud.replay.snapshots import Snapshot
from noetl_cloud.replay.state import LINEAGE, SURFACES, ReplayState
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
_SNAPSHOTS = text(
    "SELECT execution_id, position, event_count, last_event_id, upcaster_registry_digest, reducer_version, "
    "checksum, state FROM projection_snapshot "
    f"WHERE {_SCOPE} AND upcaster_registry_digest = :digest AND reducer_version = :version AND position <= :upto "
    "ORDER BY position DESC LIMIT :limit"
)
_PROJECTIONS = text(
    "SELECT projection_type, version, position, last_event_id, state, checksum, upcaster_registry_digest, "
    f"reducer_version, lag_ms, projected_at FROM projection WHERE {_SCOPE}"
)
_UPSERT_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id, projection_type) DO UPDATE SET "
    "version = EXCLUDED.version, position = EXCLUDED.position, last_event_id = EXCLUDED.last_event_id, "
    "state = EXCLUDED.state, checksum = EXCLUDED.checksum, "
    "upcaster_registry_digest = EXCLUDED.upcaster_registry_digest, reducer_version = EXCLUDED.reducer_version, "
    "event_time_watermark = EXCLUDED.event_time_watermark, lag_ms = EXCLUDED.lag_ms, "
    "projected_at = EXCLUDED.projected_at "
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


def snapshots(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    *,
    upto: int,
    registry_digest: str,
    reducer_version: int,
    limit: int = 3,
) -> list[Snapshot]:
    """The newest snapshots at or before ``upto`` folded with this digest and reducer version."""
    params = {
        **_scope(tenant_id, organization_id, execution_id),
        "upto": upto,
        "digest": registry_digest,
        "version": reducer_version,
        "limit": limit,
    }
    return [
        Snapshot(
            tenant_id=tenant_id,
            organization_id=organization_id,
            execution_id=str(r.execution_id),
            position=int(r.position),
            event_count=int(r.event_count),
            last_event_id=None if r.last_event_id is None else str(r.last_event_id),
            registry_digest=r.upcaster_registry_digest,
            reducer_version=int(r.reducer_version),
            checksum=r.checksum,
            state=r.state,
        )
        for r in conn.execute(_SNAPSHOTS, params)
    ]


def save_snapshots(conn: Connection, items: Sequence[Snapshot]) -> None:
    """Insert snapshots; one already stored for the same position, digest and version is kept."""
    if not items:
        return
    rows = [
        {
            "tenant_id": s.tenant_id,
            "organization_id": s.organization_id,
            "execution_id": int(s.execution_id),
            "aggregate_type": "replay_state",
            "aggregate_id": s.aggregate_id,
            "position": s.position,
            "event_count": s.event_count,
            "last_event_id": None if s.last_event_id is None else int(s.last_event_id),
            "upcaster_registry_digest": s.registry_digest,
            "reducer_version": s.reducer_version,
            "checksum": s.checksum,
            "state": s.state,
        }
        for s in items
    ]
    insert_rows(conn, projection_snapshot, rows, suffix="ON CONFLICT DO NOTHING")


class StoredProjection:
    """The live projection rows of one execution, as the projector last wrote them."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = {r.projection_type: r for r in rows}

    @property
    def exists(self) -> bool:
        return bool(self.rows)

    def consistent(self, registry_digest: str, reducer_version: int) -> bool:
        """Every kind present, all at one version, folded with this registry and reducer version."""
        kinds = (*SURFACES, LINEAGE)
        if set(self.rows) != set(kinds):
            return False
        first = self.rows[kinds[0]]
        return all(
            r.version == first.version
            and r.position == first.position
            and r.upcaster_registry_digest == registry_digest
            and r.reducer_version == reducer_version
            for r in self.rows.values()
        )

    def state(self) -> ReplayState:
        first = self.rows[SURFACES[0]]
        return ReplayState.from_parts(
            {name: self.rows[name].state for name in SURFACES},
            self.rows[LINEAGE].state,
            event_count=int(first.version),
            last_event_id=None if first.last_event_id is None else str(first.last_event_id),
            last_position=int(first.position),
        )

    def checksums(self) -> dict[str, str]:
        return {name: self.rows[name].checksum for name in SURFACES if name in self.rows}

    def summary(self) -> dict[str, Any]:
        if not self.rows:
            return {"exists": False}
        first = next(iter(self.rows.values()))
        return {
            "exists": True,
            "version": int(first.version),
            "position": int(first.position),
            "last_event_id": None if first.last_event_id is None else str(first.last_event_id),
            "lag_ms": first.lag_ms,
            "projected_at": first.projected_at.isoformat(),
        }


def load_projection(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, *, lock: bool = False
) -> StoredProjection:
    statement = _PROJECTIONS if not lock else text(str(_PROJECTIONS) + " FOR UPDATE")
    return StoredProjection(list(conn.execute(statement, _scope(tenant_id, organization_id, execution_id))))


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
) -> int:
    """Upsert every projection row of the execution; a row already at a higher version is kept
    (version-monotonic). The number of rows written."""
    common = {
        "tenant_id": tenant_id,
        "organization_id": organization_id,
        "execution_id": int(execution_id),
        "version": state.event_count,
        "position": state.last_position,
        "last_event_id": None if state.last_event_id is None else int(state.last_event_id),
        "upcaster_registry_digest": registry_digest,
        "reducer_version": reducer_version,
        "event_time_watermark": watermark,
        "lag_ms": lag_ms,
        "projected_at": projected_at,
    }
    checksums = state.surface_checksums()
    rows = [
        {**common, "projection_type": name, "state": state.rows(name), "checksum": checksums[name]} for name in SURFACES
    ]
    lineage = state.lineage()
    rows.append({**common, "projection_type": LINEAGE, "state": lineage, "checksum": _lineage_checksum(lineage)})
    result = insert_rows(conn, projection, rows, suffix=_UPSERT_SUFFIX)
    return 0 if result is None else int(result.rowcount)


def _lineage_checksum(rows: list[dict[str, Any]]) -> str:
    from noetl_cloud.envelope import sha256_hex

    return sha256_hex(canonical_json(rows))
