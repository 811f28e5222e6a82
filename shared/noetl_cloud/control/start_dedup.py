"""The opt-in dedup window of execution starts (``dedup: {key, window_secs}``), a mixin of
:class:`~noetl_cloud.control.executions.ExecutionService`.

A key is claimed in the start's own transaction (``subscription_dedup``, one row per scope and key):
a key held within its window makes the item a ``duplicate`` of the execution that holds it, recorded
as a ``subscription.message.deduplicated`` event; a key whose window passed is taken over. The
reclaim job deletes the keys whose window has passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Engine, text

from noetl_cloud.control.catalog import CatalogEntry
from noetl_cloud.control.models import ExecuteRequest, ItemResult
from noetl_cloud.envelope import EventFactory, utc_now
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRow


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
    dedup_scope: str | None = None


class StartDedup:
    """Dedup keys of starts (a mixin of the execution service; it declares what it uses of it)."""

    engine: Engine
    store: PostgresEventStore
    events: EventFactory

    def _claim_dedup(
        self, conn: Connection, plans: list[StartPlan], results: list[ItemResult | None], outbox: list[OutboxRow]
    ) -> list[StartPlan]:
        """Claim each dedup key in this transaction; a key held within its window is a duplicate."""
        keep: list[StartPlan] = []
        seen: dict[tuple[str, str], StartPlan] = {}
        now = utc_now()
        for plan in plans:
            if plan.dedup_scope is None:
                keep.append(plan)
                continue
            assert plan.request.dedup is not None
            key = (plan.dedup_scope, plan.request.dedup.key)
            if key in seen:  # the same key twice in one batch: the second is a duplicate of the first
                results[plan.index] = self._duplicate(conn, plan, seen[key].execution_id, seen[key].pool, outbox)
                continue
            claimed = conn.execute(
                text(
                    "INSERT INTO subscription_dedup (scope, dedup_key, execution_id, seen_at, expires_at) "
                    "VALUES (:scope, :key, :eid, :now, :expires) "
                    "ON CONFLICT (scope, dedup_key) DO UPDATE SET execution_id = EXCLUDED.execution_id, "
                    "seen_at = EXCLUDED.seen_at, expires_at = EXCLUDED.expires_at "
                    "WHERE subscription_dedup.expires_at <= EXCLUDED.seen_at RETURNING execution_id"
                ),
                {
                    "scope": key[0],
                    "key": key[1],
                    "eid": plan.execution_id,
                    "now": now,
                    "expires": now + timedelta(seconds=plan.request.dedup.window_secs),
                },
            ).scalar()
            if claimed is not None:
                seen[key] = plan
                keep.append(plan)
                continue
            original = conn.execute(
                text(
                    "SELECT d.execution_id, e.execution_pool FROM subscription_dedup d "
                    "LEFT JOIN execution e ON e.execution_id = d.execution_id "
                    "WHERE d.scope = :scope AND d.dedup_key = :key"
                ),
                {"scope": key[0], "key": key[1]},
            ).one()
            results[plan.index] = self._duplicate(conn, plan, original.execution_id, original.execution_pool, outbox)
        return keep

    def _duplicate(
        self, conn: Connection, plan: StartPlan, original: int, pool: str | None, outbox: list[OutboxRow]
    ) -> ItemResult:
        """The answer to a duplicate within the window, after recording it as an event."""
        self._dedup_event(conn, plan, original, pool, outbox)
        return ItemResult(index=plan.index, status="duplicate", execution_id=str(original), execution_pool=pool)

    def _dedup_event(
        self, conn: Connection, plan: StartPlan, original: int, pool: str | None, outbox: list[OutboxRow]
    ) -> None:
        request = plan.request
        assert request.dedup is not None
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
                        "dedup_key": request.dedup.key,
                        "window_secs": request.dedup.window_secs,
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
