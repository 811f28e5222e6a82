"""The SQL of replay-state snapshots: read, write compactly, prune to the few replay needs.

A snapshot's state is stored as zlib-compressed canonical JSON (``state_compressed``); rows written
before migration 0009 keep their JSONB ``state`` and are read as they are. After writing, the
projector prunes an execution's snapshots to the newest ``keep`` of its registry digest and reducer
version, plus the *anchors* — those whose event count is a multiple of ``anchor_every`` — so time
travel far back still starts near its cutoff. Snapshots of another digest or reducer version can
never seed this code's replay and are removed. The number kept is ``keep + events / anchor_every``,
not ``events / snapshot_every``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.envelope import canonical_json
from noetl_cloud.replay.snapshots import Snapshot

_SCOPE = "tenant_id = :t AND organization_id = :o AND execution_id = :e"
_SNAPSHOTS = text(
    "SELECT execution_id, position, event_count, last_event_id, upcaster_registry_digest, reducer_version, "
    "checksum, state, state_compressed FROM projection_snapshot "
    f"WHERE {_SCOPE} AND upcaster_registry_digest = :digest AND reducer_version = :version AND position <= :upto "
    "ORDER BY position DESC LIMIT :limit"
)
_PRUNE = text(
    f"DELETE FROM projection_snapshot s WHERE {_SCOPE} AND ("
    "  upcaster_registry_digest <> :digest OR reducer_version <> :version"
    "  OR (position < (SELECT k.position FROM projection_snapshot k WHERE k.tenant_id = :t"
    "      AND k.organization_id = :o AND k.execution_id = :e AND k.upcaster_registry_digest = :digest"
    "      AND k.reducer_version = :version ORDER BY k.position DESC OFFSET :skip LIMIT 1)"
    "    AND NOT (:anchor > 0 AND mod(event_count, GREATEST(:anchor, 1)) = 0)))"
)
_LEVEL = 6  # zlib: the state's canonical JSON is repetitive (row keys), ~10x smaller at this level


def _scope(tenant_id: str, organization_id: str, execution_id: str | int) -> dict[str, Any]:
    return {"t": tenant_id, "o": organization_id, "e": int(execution_id)}


def compress(state: dict[str, Any]) -> bytes:
    return zlib.compress(canonical_json(state).encode("utf-8"), _LEVEL)


def decompress(blob: bytes) -> dict[str, Any]:
    value = json.loads(zlib.decompress(blob).decode("utf-8"))
    assert isinstance(value, dict)
    return value


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
            state=decompress(bytes(r.state_compressed)) if r.state_compressed is not None else r.state,
        )
        for r in conn.execute(_SNAPSHOTS, params)
    ]


def save_snapshots(conn: Connection, items: Sequence[Snapshot]) -> None:
    """Insert snapshots, compressed; one already stored for the same position, digest and version is kept."""
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
            "state_compressed": compress(s.state),
        }
        for s in items
    ]
    # bytea does not travel in db.bulk's JSON rows: one statement per snapshot (there are few)
    statement = text(
        "INSERT INTO projection_snapshot (tenant_id, organization_id, execution_id, aggregate_type, aggregate_id, "
        "position, event_count, last_event_id, upcaster_registry_digest, reducer_version, checksum, "
        "state_compressed) VALUES (:tenant_id, :organization_id, :execution_id, :aggregate_type, :aggregate_id, "
        ":position, :event_count, :last_event_id, :upcaster_registry_digest, :reducer_version, :checksum, "
        ":state_compressed) ON CONFLICT DO NOTHING"
    )
    for row in rows:
        conn.execute(statement, row)


def prune(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    *,
    registry_digest: str,
    reducer_version: int,
    keep: int,
    anchor_every: int,
) -> int:
    """Remove the execution's snapshots replay no longer needs (see the module docstring); how many."""
    params = {
        **_scope(tenant_id, organization_id, execution_id),
        "digest": registry_digest,
        "version": reducer_version,
        "skip": max(keep, 1) - 1,
        "anchor": anchor_every,
    }
    return int(conn.execute(_PRUNE, params).rowcount)
