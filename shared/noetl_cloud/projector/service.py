"""The projector: folds an execution's events into its live projection rows, idempotently.

A delivery names one event. The projector never folds "that event": it locks the execution
(a transaction-scoped advisory lock, so two instances never fold one execution at once), loads
the stored projection, and folds every event of the execution after the projection's tracking
position, in store order, up to the tip — the same reducers and upcasters as replay. So a
duplicate delivery, or one that arrives after later events were already folded, changes nothing
(``duplicate``), and deliveries in any order converge to the fold of the log.

Guards: a projection folded with another registry digest or reducer version, or whose rows
disagree on their version, is refolded from the first event; so is one that no longer covers
every event up to its position (an event of another stream of the execution committed late below
it). Rows are written with a version-monotonic upsert (``version`` = events folded), and a
replay-state snapshot is written each time the event count reaches a multiple of
``snapshot_every``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.envelope import parse_time, utc_now
from noetl_cloud.errors import NotFound
from noetl_cloud.replay import postgres as sql
from noetl_cloud.replay.reducers import REDUCER_VERSION, fold
from noetl_cloud.replay.snapshots import Snapshot, capture
from noetl_cloud.replay.state import ReplayState
from noetl_cloud.replay.upcasters import UpcasterRegistry

_EVENT = text("SELECT position, tenant_id, organization_id, execution_id, stream_id FROM event WHERE event_id = :id")
_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
# Executions of one scope started within the window, quiet for ``settle_s``, whose projection is behind
# the last event of their log (or missing). ``created_at`` bounds the scan by the execution index.
_BEHIND = text(
    "SELECT x.execution_id FROM execution x "
    "LEFT JOIN projection p ON p.tenant_id = x.tenant_id AND p.organization_id = x.organization_id "
    "AND p.execution_id = x.execution_id AND p.projection_type = 'execution' "
    "WHERE x.tenant_id = :t AND x.organization_id = :o "
    "AND x.created_at >= now() - make_interval(secs => :window_s) "
    "AND x.updated_at < now() - make_interval(secs => :settle_s) "
    "AND COALESCE(p.position, 0) < (SELECT COALESCE(max(e.position), 0) FROM event e "
    "  WHERE e.tenant_id = x.tenant_id AND e.organization_id = x.organization_id AND e.execution_id = x.execution_id) "
    "ORDER BY x.created_at LIMIT :limit"
)
_LATEST = text(
    "SELECT last_event_id, lag_ms, projected_at FROM projection WHERE projection_type = 'execution' "
    "ORDER BY projected_at DESC LIMIT 1"
)


@dataclass
class Applied:
    """What one delivery did."""

    outcome: str  # applied | duplicate | unknown_event | no_execution
    event_id: str | None
    execution_id: str | None = None
    applied: int = 0
    position: int | None = None
    refolded: bool = False
    snapshots: int = 0

    def body(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Metrics:
    """Counters of this process (the database holds the durable figures)."""

    deliveries: int = 0
    applied_events: int = 0
    duplicates: int = 0
    unknown: int = 0
    refolds: int = 0
    snapshots: int = 0
    last_applied_event_id: str | None = None
    last_lag_ms: int | None = None
    max_lag_ms: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, result: Applied, lag_ms: int | None) -> None:
        with self._lock:
            self.deliveries += 1
            self.applied_events += result.applied
            self.duplicates += result.outcome == "duplicate"
            self.unknown += result.outcome in ("unknown_event", "no_execution")
            self.refolds += result.refolded
            self.snapshots += result.snapshots
            if result.outcome == "applied":
                self.last_applied_event_id = result.event_id
            if lag_ms is not None:
                self.last_lag_ms = lag_ms
                self.max_lag_ms = max(self.max_lag_ms, lag_ms)

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Projector:
    def __init__(
        self,
        engine: Engine,
        registry: UpcasterRegistry,
        *,
        snapshot_every: int = 1000,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.snapshot_every = snapshot_every
        self.clock = clock
        self.metrics = Metrics()

    def handle(self, event_id: int) -> Applied:
        """Fold the execution of event ``event_id`` up to its tip (the push endpoint's one call)."""
        lag: int | None = None
        with self.engine.begin() as conn:
            found = conn.execute(_EVENT, {"id": event_id}).first()
            if found is None:  # not in this log (another deployment's, or a test's database)
                result = Applied("unknown_event", str(event_id))
            elif found.execution_id is None:  # catalog, subscription, spool events: no execution surface
                result = Applied("no_execution", str(event_id))
            else:
                own_stream = found.stream_id == f"execution/{found.execution_id}"
                result, lag = self._project(
                    conn,
                    found.tenant_id,
                    found.organization_id,
                    str(found.execution_id),
                    str(event_id),
                    int(found.position) if own_stream else None,
                )
        self.metrics.record(result, lag)
        return result

    def project(self, tenant_id: str, organization_id: str, execution_id: str) -> Applied:
        """Fold an execution up to its tip (a rebuild, or a catch-up without a delivery)."""
        with self.engine.begin() as conn:
            result, lag = self._project(conn, tenant_id, organization_id, execution_id, None, None)
        self.metrics.record(result, lag)
        return result

    def catch_up(
        self, tenant_id: str, organization_id: str, *, window_s: float, settle_s: float, limit: int = 200
    ) -> dict[str, int]:
        """Fold every execution whose projection is behind its log although no delivery is due: the
        broker lost the deliveries of its last events (a topic recreated empty, a message dropped after
        its retries). Executions started within ``window_s`` and quiet for ``settle_s`` are looked at,
        ``limit`` a run (Cloud Scheduler calls it every few minutes). ``{behind, applied}``."""
        params = {"t": tenant_id, "o": organization_id, "window_s": window_s, "settle_s": settle_s, "limit": limit}
        with self.engine.connect() as conn:
            behind = [str(r.execution_id) for r in conn.execute(_BEHIND, params)]
        applied = sum(self.project(tenant_id, organization_id, eid).outcome == "applied" for eid in behind)
        return {"behind": len(behind), "applied": applied}

    def _project(
        self,
        conn: Connection,
        tenant_id: str,
        organization_id: str,
        execution_id: str,
        event_id: str | None,
        own_stream_position: int | None,
    ) -> tuple[Applied, int | None]:
        scope = (tenant_id, organization_id, execution_id)
        conn.execute(_LOCK, {"key": "/".join(scope)})
        stored = sql.load_projection(conn, *scope)
        digest = self.registry.digest
        refolded = False
        if stored.consistent(digest, REDUCER_VERSION):
            state = stored.state()
        else:
            state, refolded = ReplayState(), stored.exists
        if own_stream_position is not None and own_stream_position <= state.last_position:
            # The execution's own stream commits in position order: everything up to here is folded.
            return Applied("duplicate", event_id, execution_id, position=state.last_position), None
        if state.event_count and sql.count_upto(conn, *scope, state.last_position) != state.event_count:
            state, refolded = ReplayState(), True  # an event committed late below the tracking position
        events = sql.read_events(conn, *scope, after=state.last_position)
        if not events:
            return Applied("duplicate", event_id, execution_id, position=state.last_position), None
        snapshots: list[Snapshot] = []

        def keep(current: ReplayState) -> None:
            snapshots.append(
                capture(
                    current,
                    tenant_id=tenant_id,
                    organization_id=organization_id,
                    execution_id=execution_id,
                    registry_digest=digest,
                    reducer_version=REDUCER_VERSION,
                )
            )

        fold(events, self.registry, state, snapshot_every=self.snapshot_every, on_snapshot=keep)
        sql.save_snapshots(conn, snapshots)
        now = self.clock()
        lag_ms = max(0, int((now - parse_time(events[-1]["ingest_time"])).total_seconds() * 1000))
        sql.save_projection(
            conn,
            state,
            tenant_id=tenant_id,
            organization_id=organization_id,
            execution_id=execution_id,
            registry_digest=digest,
            reducer_version=REDUCER_VERSION,
            watermark=parse_time(max(e["event_time"] for e in events)),
            lag_ms=lag_ms,
            projected_at=now,
        )
        result = Applied(
            "applied",
            event_id or state.last_event_id,
            execution_id,
            applied=len(events),
            position=state.last_position,
            refolded=refolded,
            snapshots=len(snapshots),
        )
        return result, lag_ms

    def status(self, scope: tuple[str, str, str] | None = None) -> dict[str, Any]:
        """Projection lag and the last applied event: of one execution, or of the latest write."""
        with self.engine.connect() as conn:
            if scope is None:
                latest = conn.execute(_LATEST).first()
                durable = (
                    {
                        "last_applied_event_id": str(latest.last_event_id) if latest.last_event_id else None,
                        "lag_ms": latest.lag_ms,
                        "projected_at": latest.projected_at.isoformat(),
                    }
                    if latest is not None
                    else {"last_applied_event_id": None, "lag_ms": None, "projected_at": None}
                )
                return {**durable, "process": self.metrics.to_dict()}
            live = sql.load_projection(conn, *scope)
            count, last = sql.tip(conn, *scope)
        if count == 0 and not live.exists:
            raise NotFound(f"no execution {scope[2]}", code="execution_not_found")
        summary = live.summary()
        return {
            "execution_id": scope[2],
            **summary,
            "last_applied_event_id": summary.get("last_event_id"),
            "events_in_log": count,
            "events_behind": count - int(summary.get("version") or 0),
            "log_position": last,
        }
