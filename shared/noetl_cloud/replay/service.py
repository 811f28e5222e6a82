"""Replay and parity over PostgreSQL: the state of an execution at a cutoff, and ``verify``.

:meth:`ReplayService.state` resolves the cutoff to a store position, seeds from the newest
compatible snapshot at or before it (same registry digest and reducer version, verifying, still
covering every event up to its position), reads the remaining events in store order and folds
them with the reducers the projector uses. :meth:`ReplayService.verify` compares the live
projection rows with a fresh fold of every event (no snapshot) and names each surface that drifts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from noetl_cloud.errors import NotFound
from noetl_cloud.replay import postgres as sql
from noetl_cloud.replay import snapshot_store
from noetl_cloud.replay.archived import ArchiveReader, cut
from noetl_cloud.replay.payloads import PayloadFetcher, summarize
from noetl_cloud.replay.projection_rows import live_checksums
from noetl_cloud.replay.reducers import REDUCER_VERSION, fold
from noetl_cloud.replay.snapshots import choose
from noetl_cloud.replay.state import CHECKSUM_ALGORITHM, SURFACES, ReplayState
from noetl_cloud.replay.upcasters import UpcasterRegistry


@dataclass(frozen=True)
class Cutoff:
    """Exactly one of the three ways to say "as of"."""

    event_id: int | None = None
    position: int | None = None
    time: datetime | None = None


@dataclass
class Replayed:
    state: ReplayState
    cutoff_position: int
    seeded_from: int | None  # the snapshot position replay started from, if any
    folded: int  # events folded after the seed


class ReplayService:
    def __init__(
        self,
        engine: Engine,
        registry: UpcasterRegistry,
        *,
        payloads: PayloadFetcher | None = None,
        archive: ArchiveReader | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.payloads = payloads
        self.archive = archive  # where an execution retention archived is read back from

    def replay(
        self, tenant_id: str, organization_id: str, execution_id: str, cutoff: Cutoff, *, use_snapshots: bool = True
    ) -> Replayed:
        """The folded state at ``cutoff``; 404 when the execution has no event in this tenant's scope."""
        scope = (tenant_id, organization_id, execution_id)
        with self.engine.connect() as conn:
            count, last = sql.tip(conn, *scope)
            if count == 0:
                archived = self.archive.rows(conn, *scope) if self.archive is not None else None
                if archived is None:
                    raise NotFound(f"no execution {execution_id}", code="execution_not_found")
                events, upto = cut(archived, cutoff, execution_id)
                state = ReplayState()
                fold(events, self.registry, state)
                return Replayed(state, upto, None, len(events))
            upto = self._position(conn, scope, cutoff, last)
            seed = None
            if use_snapshots:
                candidates = snapshot_store.snapshots(
                    conn, *scope, upto=upto, registry_digest=self.registry.digest, reducer_version=REDUCER_VERSION
                )
                seed = choose(
                    candidates,
                    cutoff_position=upto,
                    registry_digest=self.registry.digest,
                    reducer_version=REDUCER_VERSION,
                )
                # A snapshot is usable only if no event committed late below its position.
                if seed is not None and sql.count_upto(conn, *scope, seed.position) != seed.event_count:
                    seed = None
            state = seed.replay_state() if seed is not None else ReplayState()
            events = sql.read_events(conn, *scope, after=state.last_position, upto=upto)
        fold(events, self.registry, state)
        return Replayed(state, upto, seed.position if seed is not None else None, len(events))

    @staticmethod
    def _position(conn: Any, scope: tuple[str, str, str], cutoff: Cutoff, last: int) -> int:
        if cutoff.event_id is not None:
            position = sql.event_position(conn, *scope, cutoff.event_id)
            if position is None:
                raise NotFound(
                    f"event {cutoff.event_id} is not an event of execution {scope[2]}", code="event_not_found"
                )
            return position
        if cutoff.position is not None:
            return min(cutoff.position, last)
        assert cutoff.time is not None
        return sql.time_position(conn, *scope, cutoff.time)

    def state(
        self,
        tenant_id: str,
        organization_id: str,
        execution_id: str,
        cutoff: Cutoff,
        *,
        surfaces: tuple[str, ...] = SURFACES,
        resolve_payloads: bool = False,
    ) -> dict[str, Any]:
        """The answer of ``GET /api/replay/state``."""
        replayed = self.replay(tenant_id, organization_id, execution_id, cutoff)
        state = replayed.state
        checksums = state.surface_checksums(surfaces)
        body: dict[str, Any] = {
            "tenant_id": tenant_id,
            "organization_id": organization_id,
            "execution_id": execution_id,
            "projection": list(surfaces),
            "state": {name: state.rows(name) for name in surfaces},
            "event_count": state.event_count,
            "last_event_id": state.last_event_id,
            "last_position": state.last_position,
            "cutoff_position": replayed.cutoff_position,
            "seeded_from_snapshot_position": replayed.seeded_from,
            "upcaster_registry_digest": self.registry.digest,
            "reducer_version": REDUCER_VERSION,
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "checksum": state.checksum(surfaces),
            "projection_checksums": checksums,
        }
        if resolve_payloads:
            body["payloads"] = summarize(state.lineage(), self.payloads)
        return body

    def verify(self, tenant_id: str, organization_id: str, execution_id: str) -> dict[str, Any]:
        """Live projection rows against a fresh fold of every event: which surfaces drift."""
        replayed = self.replay(
            tenant_id, organization_id, execution_id, Cutoff(position=sql.MAX_POSITION), use_snapshots=False
        )
        fresh = replayed.state.surface_checksums()
        with self.engine.connect() as conn:
            tracking = sql.load_tracking(conn, tenant_id, organization_id, execution_id)
            live = live_checksums(conn, tenant_id, organization_id, execution_id, tracking)
        drift = [name for name in SURFACES if live.get(name) != fresh[name]]
        summary = tracking.summary() if tracking is not None else {"exists": False}
        return {
            "tenant_id": tenant_id,
            "organization_id": organization_id,
            "execution_id": execution_id,
            "ok": not drift,
            "drift": drift,
            "live": {**summary, "projection_checksums": live},
            "replayed": {
                "event_count": replayed.state.event_count,
                "last_event_id": replayed.state.last_event_id,
                "last_position": replayed.state.last_position,
                "projection_checksums": fresh,
                "checksum": replayed.state.checksum(),
            },
            "events_behind": replayed.state.event_count - int(summary.get("version") or 0),
            "upcaster_registry_digest": self.registry.digest,
            "checksum_algorithm": CHECKSUM_ALGORITHM,
        }
