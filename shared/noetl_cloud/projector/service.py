"""The projector: folds an execution's events into its live projection rows, idempotently.

A delivery names one event. The projector never folds "that event" alone:

1. it reads the event with the projection's tracking row (position, events folded; no surface state).
   A delivery of an event of the execution's own stream at or below the tracking position is a
   ``duplicate`` (that stream commits in position order): nothing else is read, no lock is taken;
2. otherwise, at the tip, it reads every event after the tracking position (one batch, however many
   deliveries it covers: those that follow are duplicates), loads only the surfaces those events
   change (:func:`~noetl_cloud.replay.reducers.touches`; from the instance's cache when it folded the
   execution last), folds with the reducers and upcasters of replay, and writes those surfaces and
   the tracking row in one autocommit statement that writes only if the tracking row is still the
   one read. No lock: three round trips;
3. when that write finds another fold committed (or for an event of another stream, a refold, a
   batch reaching a snapshot), it folds under the execution's lock: the tracking row ``FOR UPDATE``
   (an advisory lock for a first fold), the events after its latest committed position, the same
   fold and write.

So duplicates and deliveries in any order converge to the fold of the log. A surface with no rows
gets no projection row; the tracking row lists the kinds that have one.

Guards: a projection folded with another registry digest or reducer version, or missing a row the
tracking row lists, is refolded from the first event; so is one that no longer covers every event up
to its position (an event of another stream of the execution committed late below it: checked when
such an event is delivered, and on a rebuild). Rows are written with a version-monotonic upsert. A
replay-state snapshot is written each time the event count reaches a multiple of
``snapshot_every`` (the batch then loads every surface), and the execution's snapshots are pruned
to the few replay needs (:mod:`noetl_cloud.replay.snapshot_store`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Engine, text

from noetl_cloud.envelope import parse_time, utc_now
from noetl_cloud.errors import NotFound
from noetl_cloud.projector import catchup
from noetl_cloud.projector.cache import Scope, SurfaceCache
from noetl_cloud.replay import postgres as sql
from noetl_cloud.replay import projection_rows, snapshot_store
from noetl_cloud.replay.reducers import REDUCER_VERSION, fold, touches
from noetl_cloud.replay.snapshots import Snapshot, capture
from noetl_cloud.replay.state import LINEAGE, ReplayState
from noetl_cloud.replay.upcasters import Event, UpcasterRegistry

_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_LATEST = text("SELECT last_event_id, lag_ms, projected_at FROM projection_tracking ORDER BY projected_at DESC LIMIT 1")


# What a committed fold leaves for the next one: (scope, version, registry digest, surfaces by row kind).
_Keep = tuple[Scope, int, str, dict[str, dict[str, Any]]]


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
    surfaces: list[str] | None = None  # the row kinds written (absent for a duplicate)

    def body(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Metrics:
    """Counters of this process (the database holds the durable figures)."""

    deliveries: int = 0
    locked_folds: int = 0  # deliveries folded under the execution's lock (not at the tip, or a lost race)
    applied_events: int = 0
    duplicates: int = 0
    unknown: int = 0
    refolds: int = 0
    snapshots: int = 0
    last_applied_event_id: str | None = None
    last_lag_ms: int | None = None
    max_lag_ms: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

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
        snapshot_keep: int = 3,
        snapshot_anchor_every: int = 0,
        cache_rows: int = 0,
        reader: Engine | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.engine = engine
        # A delivery runs on autocommit connections (its fold at the tip is one conditional write).
        self.reader = reader or engine.execution_options(isolation_level="AUTOCOMMIT")
        self.registry = registry
        self.snapshot_every = snapshot_every
        self.snapshot_keep = snapshot_keep
        self.snapshot_anchor_every = snapshot_anchor_every
        self.clock = clock
        self.metrics = Metrics()
        self.cache = SurfaceCache(cache_rows)

    def handle(self, event_id: int) -> Applied:
        """Fold the execution of event ``event_id`` up to its tip (the push endpoint's one call)."""
        with self.reader.connect() as reader:  # autocommit: each statement its own transaction
            return self._deliver(reader, event_id)

    def _deliver(self, reader: Connection, event_id: int) -> Applied:
        lag: int | None = None
        keep: _Keep | None = None
        found = sql.delivery(reader, event_id)
        if found is None:  # not in this log (another deployment's, or a test's database)
            result: Applied | None = Applied("unknown_event", str(event_id))
        elif found.execution_id is None:  # catalog, subscription, spool events: no execution surface
            result = Applied("no_execution", str(event_id))
        else:
            scope = (found.tenant_id, found.organization_id, found.execution_id)
            own_stream = found.stream_id == f"execution/{found.execution_id}"
            tracking = found.tracking
            if own_stream and self._covers(tracking, found.position):
                assert tracking is not None
                result = Applied("duplicate", str(event_id), scope[2], position=tracking.position)
            else:
                result, lag, keep = self._at_tip(reader, scope, str(event_id), found) if own_stream else (None,) * 3
                if result is None:  # not a plain fold at the tip, or another fold committed first
                    self.metrics.count("locked_folds")
                    with self.engine.begin() as conn:
                        result, lag, keep = self._project(
                            conn, scope, str(event_id), found.position, own_stream=own_stream, tracking=tracking
                        )
        if keep is not None:  # committed: the next fold of the execution may start from these
            self.cache.put(*keep)
        assert result is not None
        self.metrics.record(result, lag)
        return result

    def _at_tip(
        self, conn: Connection, scope: tuple[str, str, str], event_id: str, found: sql.Delivery
    ) -> tuple[Applied | None, int | None, _Keep | None]:
        """The fold of a delivery at the tip without a lock: the events after the tracking position the
        first read saw, the surfaces they touch from the cache or one read, and the rows written in one
        statement only if the tracking row is still the one read (else None: the caller folds under the
        lock). Not for a refold, nor for a batch that reaches a snapshot."""
        tracking = found.tracking
        if tracking is not None and not tracking.folded_with(self.registry.digest, REDUCER_VERSION):
            return None, None, None
        after = 0 if tracking is None else tracking.position
        events = [self.registry.upcast(e) for e in sql.read_events(conn, *scope, after=after)]
        if not events:
            return None, None, None
        every, version = self.snapshot_every, 0 if tracking is None else tracking.version
        if every > 0 and version // every != (version + len(events)) // every:
            return None, None, None
        state, kinds, present = self._seed(conn, scope, tracking, events)
        if state is None:
            return None, None, None
        fold(events, self.registry, state)
        stored = None if tracking is None else tracking.row_kinds
        return self._save(conn, scope, event_id, events, state, kinds, present, stored, unless_changed=tracking)

    def _save(
        self,
        conn: Connection,
        scope: tuple[str, str, str],
        event_id: str | None,
        events: list[Event],
        state: ReplayState,
        kinds: list[str],
        present: set[str],
        stored: frozenset[str] | None,
        *,
        refolded: bool = False,
        snapshots: int = 0,
        unless_changed: sql.Tracking | Literal[False] | None = False,
    ) -> tuple[Applied | None, int | None, _Keep | None]:
        """Write the folded ``kinds`` (those with rows; ``stored``: the kinds with a row before, None for a
        fold from the first event) and the tracking row; what the fold did, or None when ``unless_changed``
        was not the tracking row any more (nothing written)."""
        now = self.clock()
        lag_ms = max(0, int((now - parse_time(events[-1]["ingest_time"])).total_seconds() * 1000))
        written = projection_rows.save_projection(
            conn,
            state,
            tenant_id=scope[0],
            organization_id=scope[1],
            execution_id=scope[2],
            registry_digest=self.registry.digest,
            reducer_version=REDUCER_VERSION,
            watermark=parse_time(max(e["event_time"] for e in events)),
            lag_ms=lag_ms,
            projected_at=now,
            kinds=kinds,
            stored=stored,
            unless_changed=unless_changed,
        )
        if written is None:
            return None, None, None
        result = Applied(
            "applied",
            event_id or state.last_event_id,
            scope[2],
            applied=len(events),
            position=state.last_position,
            refolded=refolded,
            snapshots=snapshots,
            surfaces=written,
        )
        kept = {kind: state.payload_refs if kind == LINEAGE else state.surfaces[kind] for kind in present}
        return result, lag_ms, (scope, state.event_count, self.registry.digest, kept)

    def project(self, tenant_id: str, organization_id: str, execution_id: str) -> Applied:
        """Fold an execution up to its tip (a rebuild, or a catch-up without a delivery): every stored
        row and the coverage of the tracking position are checked first."""
        scope = (tenant_id, organization_id, execution_id)
        with self.engine.begin() as conn:
            tracking = sql.load_tracking(conn, *scope)
            result, lag, keep = self._project(conn, scope, None, None, own_stream=False, tracking=tracking)
        if keep is not None:
            self.cache.put(*keep)
        self.metrics.record(result, lag)
        return result

    def catch_up(
        self, tenant_id: str, organization_id: str, *, window_s: float, settle_s: float, limit: int = 200
    ) -> dict[str, int]:
        """Fold every execution whose projection is behind its log although no delivery is due (the
        broker lost the deliveries of its last events). Only the events written since the last run
        are looked at (:mod:`noetl_cloud.projector.catchup`). ``{behind, applied}``."""
        with self.engine.begin() as conn:
            run = catchup.lagging(conn, tenant_id, organization_id, window_s=window_s, settle_s=settle_s, limit=limit)
        applied = sum(self.project(tenant_id, organization_id, eid).outcome == "applied" for eid in run.behind)
        if run.complete:
            with self.engine.begin() as conn:
                catchup.advance(conn, tenant_id, organization_id, run)
        return {"behind": len(run.behind), "applied": applied}

    def _project(
        self,
        conn: Connection,
        scope: tuple[str, str, str],
        event_id: str | None,
        delivered: int | None,
        *,
        own_stream: bool,
        tracking: sql.Tracking | None,
    ) -> tuple[Applied, int | None, _Keep | None]:
        execution_id = scope[2]
        digest = self.registry.digest
        # One fold of an execution at a time: its tracking row's lock (which reads the latest committed row:
        # another instance may have folded meanwhile) with the events after it, or for a first fold an
        # advisory lock on the execution.
        locked = None if tracking is None else sql.lock_and_read(conn, *scope)
        if locked is None:
            conn.execute(_LOCK, {"key": "/".join(scope)})
            tracking = sql.load_tracking(conn, *scope, lock=True)
        else:
            tracking = locked[0]
        fresh = tracking is None or not tracking.folded_with(digest, REDUCER_VERSION)
        if tracking is not None and not fresh:
            if delivered is None and not projection_rows.rows_consistent(conn, *scope, tracking):
                fresh = True  # a rebuild: a row missing, ahead of the tracking row or folded otherwise
            elif (delivered is None or delivered <= tracking.position) and tracking.version:
                if sql.count_upto(conn, *scope, tracking.position) != tracking.version:
                    fresh = True  # an event committed late below the tracking position
                elif delivered is not None:
                    return Applied("duplicate", event_id, execution_id, position=tracking.position), None, None
        refolded = fresh and tracking is not None
        if locked is not None and not fresh:
            read = locked[1]
        else:
            read = sql.read_events(conn, *scope, after=0 if fresh or tracking is None else tracking.position)
        events = [self.registry.upcast(e) for e in read]
        if not events:
            position = 0 if tracking is None else tracking.position
            return Applied("duplicate", event_id, execution_id, position=position), None, None
        basis = None if fresh else tracking
        state, kinds, present = self._seed(conn, scope, basis, events)
        if state is None:  # a row it needs is missing or was folded otherwise: refold from the first event
            refolded, basis = True, None
            events = [self.registry.upcast(e) for e in sql.read_events(conn, *scope)]
            state, kinds, present = ReplayState(), list(sql.KINDS), set(sql.KINDS)
        snapshots: list[Snapshot] = []

        def keep(current: ReplayState) -> None:
            snapshots.append(
                capture(
                    current,
                    tenant_id=scope[0],
                    organization_id=scope[1],
                    execution_id=execution_id,
                    registry_digest=digest,
                    reducer_version=REDUCER_VERSION,
                )
            )

        fold(events, self.registry, state, snapshot_every=self.snapshot_every, on_snapshot=keep)
        if snapshots:
            snapshot_store.save_snapshots(conn, snapshots)
            snapshot_store.prune(
                conn,
                *scope,
                registry_digest=digest,
                reducer_version=REDUCER_VERSION,
                keep=self.snapshot_keep,
                anchor_every=self.snapshot_anchor_every,
            )
        stored = None if basis is None else basis.row_kinds
        saved = self._save(
            conn, scope, event_id, events, state, kinds, present, stored, refolded=refolded, snapshots=len(snapshots)
        )
        assert saved[0] is not None  # under the lock: always written
        return saved[0], saved[1], saved[2]

    def _covers(self, tracking: sql.Tracking | None, position: int) -> bool:
        """The tracking row covers an event of the execution's own stream at ``position``: that stream
        commits in position order, so everything up to it is folded."""
        return (
            tracking is not None
            and tracking.folded_with(self.registry.digest, REDUCER_VERSION)
            and position <= tracking.position
        )

    def _seed(
        self, conn: Connection, scope: tuple[str, str, str], tracking: sql.Tracking | None, events: list[Event]
    ) -> tuple[ReplayState | None, list[str], set[str]]:
        """The state to fold ``events`` onto and the row kinds to write: every kind for a fold from the
        first event, else those the events touch (loaded alone, unless the batch reaches a snapshot:
        a snapshot is the whole state)."""
        if tracking is None:
            return ReplayState(), list(sql.KINDS), set(sql.KINDS)
        touched: set[str] = set()
        for event in events:
            touched |= touches(event)
        kinds = [kind for kind in sql.KINDS if kind in touched]
        every = self.snapshot_every
        snapshot_due = every > 0 and tracking.version // every != (tracking.version + len(events)) // every
        need = set(sql.KINDS if snapshot_due else kinds)
        cached = self.cache.take(scope, tracking.version, self.registry.digest)
        state = projection_rows.load_state(conn, *scope, tracking, need - set(cached))
        if state is None:
            return None, kinds, set()
        for kind, rows in cached.items():  # as this instance committed them at this very version
            if kind == LINEAGE:
                state.payload_refs = rows
            else:
                state.surfaces[kind] = rows
        return state, kinds, need | set(cached)

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
            tracking = sql.load_tracking(conn, *scope)
            count, last = sql.tip(conn, *scope)
        if count == 0 and tracking is None:
            raise NotFound(f"no execution {scope[2]}", code="execution_not_found")
        summary = tracking.summary() if tracking is not None else {"exists": False}
        return {
            "execution_id": scope[2],
            **summary,
            "last_applied_event_id": summary.get("last_event_id"),
            "events_in_log": count,
            "events_behind": count - int(summary.get("version") or 0),
            "log_position": last,
        }
