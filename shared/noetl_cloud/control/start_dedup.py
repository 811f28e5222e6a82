"""The start keys of execution starts, a mixin of :class:`~noetl_cloud.control.executions.ExecutionService`:
the opt-in dedup window (``dedup: {key, window_secs}``) and the delivery key of the ingress's replay
protection (``delivery: {key, window_secs}``).

A key is claimed in the start's own transaction (``subscription_dedup``, one row per scope and key),
so a start and its key commit together: a key held within its window makes the item a ``duplicate``
of the execution that holds it; a key whose window passed is taken over; a concurrent start with the
same key waits on the first one's row and is its duplicate once it commits (or takes the key when it
rolls back). A ``dedup`` duplicate is recorded as a ``subscription.message.deduplicated`` event; a
``delivery`` duplicate (a re-sent or replayed delivery, which the ingress counts) records nothing, so
a replayed request cannot grow the event log. When a start carries both keys and only the second is
held, the first is pointed at the execution that holds the second. The reclaim job deletes the keys
whose window has passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.control.catalog import CatalogEntry
from noetl_cloud.control.models import DedupIn, ExecuteRequest, ItemResult
from noetl_cloud.db.bulk import InsertBatch
from noetl_cloud.envelope import EventFactory, utc_now
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRow

# A key claimed for an execution: a new row, or one whose window has passed taken over; no row when
# the key is held, or when ``guard`` (the start statement's catalog guard, for a lone start whose
# claim is that statement's precondition) is false.
_CLAIM_SQL = (
    "INSERT INTO subscription_dedup (scope, dedup_key, execution_id, seen_at, expires_at) "
    "SELECT :scope, :key, :eid, :now, :expires WHERE {guard} "
    "ON CONFLICT (scope, dedup_key) DO UPDATE SET execution_id = EXCLUDED.execution_id, "
    "seen_at = EXCLUDED.seen_at, expires_at = EXCLUDED.expires_at "
    "WHERE subscription_dedup.expires_at <= EXCLUDED.seen_at"
)
_CLAIM = text(_CLAIM_SQL.format(guard="TRUE") + " RETURNING execution_id")
# The execution that held a key when a claim at ``now`` failed (none when the claim failed on its guard).
_HELD = text(
    "SELECT d.execution_id, e.execution_pool FROM subscription_dedup d "
    "LEFT JOIN execution e ON e.execution_id = d.execution_id "
    "WHERE d.scope = :scope AND d.dedup_key = :key AND d.execution_id <> :eid AND d.expires_at > :now"
)
_REPOINT = text("UPDATE subscription_dedup SET execution_id = :eid WHERE scope = :scope AND dedup_key = :key")


@dataclass(frozen=True, slots=True)
class StartKey:
    """One key a start claims: ``kind`` is ``delivery`` or ``dedup``."""

    kind: str
    scope: str
    key: DedupIn


@dataclass
class StartPlan:
    """One valid item on its way into the database."""

    index: int
    request: ExecuteRequest
    entry: CatalogEntry
    pool: str
    trace: dict[str, str] | None
    execution_id: int
    step: str
    keys: list[StartKey] = field(default_factory=list)


def start_keys(request: ExecuteRequest, tenant: str, org: str) -> list[StartKey]:
    """The keys ``request`` claims, the delivery's first, each scoped to the tenant and the parent
    (a listener's starts name their subscription as the parent)."""
    scope = f"{tenant}/{org}/{request.parent_execution_id or '-'}"
    keys = []
    if request.delivery is not None:
        keys.append(StartKey("delivery", f"delivery/{scope}", request.delivery))
    if request.dedup is not None:
        keys.append(StartKey("dedup", scope, request.dedup))
    return keys


def _claim_params(plan: StartPlan, key: StartKey, now: datetime) -> dict[str, Any]:
    """The binds of a claim of ``key`` for the plan's execution at ``now``."""
    expires = now + timedelta(seconds=key.key.window_secs)
    return {"scope": key.scope, "key": key.key.key, "eid": plan.execution_id, "now": now, "expires": expires}


def _holder(conn: Connection, plan: StartPlan, key: StartKey, now: datetime) -> tuple[int, str | None] | None:
    """The execution (id, pool) that held ``key`` when the plan's claim at ``now`` failed."""
    params = {"scope": key.scope, "key": key.key.key, "eid": plan.execution_id, "now": now}
    held = conn.execute(_HELD, params).first()
    return None if held is None else (int(held.execution_id), held.execution_pool)


class StartDedup:
    """Start keys (a mixin of the execution service; it declares what it uses of it)."""

    engine: Engine
    store: PostgresEventStore
    events: EventFactory

    def _claim_dedup(
        self, conn: Connection, plans: list[StartPlan], results: list[ItemResult | None], outbox: list[OutboxRow]
    ) -> list[StartPlan]:
        """Claim each plan's keys in this transaction; a plan with a key held within its window is a
        duplicate of the holder's execution, and is left out of the plans returned."""
        keep: list[StartPlan] = []
        seen: dict[tuple[str, str], StartPlan] = {}  # the same key twice in one batch
        now = utc_now()
        for plan in plans:
            taken: list[StartKey] = []
            holder: tuple[int, str | None] | None = None
            for key in plan.keys:
                first = seen.get((key.scope, key.key.key))
                holder = (first.execution_id, first.pool) if first is not None else self._take(conn, plan, key, now)
                if holder is not None:
                    self._duplicate(conn, plan, key, taken, holder, outbox, results)
                    break
                taken.append(key)
            if holder is None:
                seen.update({(k.scope, k.key.key): plan for k in taken})
                keep.append(plan)
        return keep

    @staticmethod
    def _claim_in(batch: InsertBatch, plan: StartPlan, guard: str, params: dict[str, Any], now: datetime) -> None:
        """Make the lone delivery key of ``plan`` the precondition of its write statement, behind the
        statement's catalog ``guard`` (which the claim carries, so the statement itself needs none):
        nothing is written unless the guard holds and the key is claimed at ``now``."""
        (key,) = plan.keys
        batch.precondition(_CLAIM_SQL.format(guard=guard), {**params, **_claim_params(plan, key, now)})

    @staticmethod
    def _held_elsewhere(conn: Connection, plan: StartPlan, results: list[ItemResult | None], now: datetime) -> bool:
        """After a lone start's statement, claiming at ``now``, wrote nothing: whether its delivery key
        was held then (the start is a duplicate of the holder, answered in ``results``, and records
        nothing); false means the catalog guard failed."""
        (key,) = plan.keys
        held = _holder(conn, plan, key, now)
        if held is None:
            return False
        results[plan.index] = ItemResult(
            index=plan.index, status="duplicate", execution_id=str(held[0]), execution_pool=held[1]
        )
        return True

    @staticmethod
    def _take(conn: Connection, plan: StartPlan, key: StartKey, now: datetime) -> tuple[int, str | None] | None:
        """Claim ``key`` for the plan's execution; the holder (execution id, pool) when it is held."""
        if conn.execute(_CLAIM, _claim_params(plan, key, now)).scalar() is not None:
            return None
        held = _holder(conn, plan, key, now)
        assert held is not None  # the claim failed with no guard: the key is held
        return held

    def _duplicate(
        self,
        conn: Connection,
        plan: StartPlan,
        key: StartKey,
        taken: list[StartKey],
        holder: tuple[int, str | None],
        outbox: list[OutboxRow],
        results: list[ItemResult | None],
    ) -> None:
        """Answer ``plan`` as a duplicate of ``holder``: the keys it took point there, and a dedup
        duplicate is recorded as an event."""
        original, pool = holder
        for other in taken:
            conn.execute(_REPOINT, {"eid": original, "scope": other.scope, "key": other.key.key})
        if key.kind == "dedup":
            self._dedup_event(conn, plan, key.key, original, pool, outbox)
        results[plan.index] = ItemResult(
            index=plan.index, status="duplicate", execution_id=str(original), execution_pool=pool
        )

    def _dedup_event(
        self,
        conn: Connection,
        plan: StartPlan,
        dedup: DedupIn,
        original: int,
        pool: str | None,
        outbox: list[OutboxRow],
    ) -> None:
        request = plan.request
        stream = f"subscription/{request.parent_execution_id or '-'}/dedup"
        self.store.append_in(
            conn,
            stream,
            [
                self.events.new(
                    "subscription.message.deduplicated",
                    stream_id=stream,
                    aggregate_type="subscription",
                    aggregate_id=request.parent_execution_id or "-",
                    execution_id=str(original),
                    payload={
                        "dedup_key": dedup.key,
                        "window_secs": dedup.window_secs,
                        "original_execution_id": str(original),
                        "execution_pool": pool,
                        "message_id": request.meta.get("message_id"),
                    },
                    meta={"trace": plan.trace} if plan.trace else {},
                )
            ],
            outbox=outbox,
        )

    def reclaim_dedup(self, limit: int = 10_000) -> int:
        """Delete dedup keys whose window has passed (a late duplicate then starts a new execution)."""
        with self.engine.begin() as conn:
            return conn.execute(
                text(
                    "DELETE FROM subscription_dedup WHERE ctid IN ("
                    " SELECT ctid FROM subscription_dedup WHERE expires_at <= now() LIMIT :limit)"
                ),
                {"limit": limit},
            ).rowcount
