"""Executions: start (single and batch, with the opt-in dedup window and the delivery key of the
ingress's replay protection), read, cancel.

Starting an execution is one transaction: its start keys (when given), the ``execution`` row with
its token state, the first orchestration turn (``playbook.started``, the entry step's admission,
``step.started``, ``command.issued`` and the ``command`` rows), the events' outbox rows and the
command notifications' outbox rows. After the commit the notifications go to
``noetl-commands-<pool>``; a failed publish stays in the outbox for the sweep.

A single request is a batch of one: the same statements, written in bulk for a batch, so a batch
of 500 costs a handful of round trips, not 500 transactions. A bad item (invalid, unknown
playbook, unknown pool) is an error result at its index and never fails the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Engine, func, select

from noetl_cloud import telemetry
from noetl_cloud.control.catalog import CatalogCache, CatalogEntry, CatalogKey, CatalogService
from noetl_cloud.control.models import ExecuteRequest, ItemResult
from noetl_cloud.control.orchestrator import Orchestrator
from noetl_cloud.control.start_dedup import StartDedup, StartPlan, start_keys
from noetl_cloud.control.turn import ExecState, Turn
from noetl_cloud.db.bulk import InsertBatch
from noetl_cloud.db.engine import one_statement
from noetl_cloud.db.rows import RowsStatement
from noetl_cloud.db.schema import event, execution
from noetl_cloud.engine.runner import merge_workload
from noetl_cloud.envelope import EventEnvelope, EventFactory, utc_now
from noetl_cloud.errors import Conflict, NoetlError, NotFound, ValidationFailed
from noetl_cloud.eventlog.postgres import PostgresEventStore, run_batch
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.observability import TraceContext
from noetl_cloud.web.errors import validation_details

TERMINAL = ("completed", "failed", "cancelled")


def entry_step(document: dict[str, Any]) -> str:
    """The step a playbook starts at: the one named ``start``, else the first."""
    names = [s.get("step") for s in document.get("workflow") or [] if isinstance(s, dict)]
    if "start" in names:
        return "start"
    if not names or not isinstance(names[0], str):
        raise ValidationFailed("the playbook has no steps", code="playbook_without_steps")
    return names[0]


def _error(index: int, exc: NoetlError) -> ItemResult:
    return ItemResult.failed(index, exc)


# One array parameter, not an expanding IN: compiled once, whatever the number of parents.
_PARENTS = RowsStatement(
    "SELECT execution_id, trace, execution_pool FROM execution WHERE execution_id = ANY(CAST(:ids AS bigint[]))"
)


class _StaleCatalog(Exception):  # a signal between two methods, never raised to a caller
    """A cached "latest version" was not the latest any more when the write statement ran."""

    def __init__(self, paths: set[str]) -> None:
        super().__init__(sorted(paths))
        self.paths = paths


class ExecutionService(StartDedup):
    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        relay: OutboxRelay,
        catalog_service: CatalogService,
        ids: SnowflakeGenerator,
        events: EventFactory,
        *,
        pools: tuple[str, ...],
        orchestrator: Orchestrator,
    ) -> None:
        self.engine = engine
        self.store = store
        self.relay = relay
        self.catalog = catalog_service
        self.ids = ids
        self.events = events
        self.pools = pools
        self.default_pool = "shared" if "shared" in pools else pools[0]
        self.orchestrator = orchestrator

    @property
    def tenant(self) -> tuple[str, str]:
        return self.events.tenant_id, self.events.organization_id

    # -- start --------------------------------------------------------------------------------

    def start_one(self, request: ExecuteRequest) -> ItemResult:
        (result,) = self.start_many([request])
        if result.exception is not None:
            raise result.exception
        return result

    def start_batch(self, items: Sequence[dict[str, Any]]) -> list[ItemResult]:
        """Validate each raw item on its own, then start the valid ones together."""
        parsed: list[ExecuteRequest | ItemResult] = []
        for index, raw in enumerate(items):
            try:
                parsed.append(ExecuteRequest.model_validate(raw))
            except ValidationError as exc:
                parsed.append(
                    _error(
                        index, ValidationFailed("execution request failed validation", details=validation_details(exc))
                    )
                )
        requests = [p for p in parsed if isinstance(p, ExecuteRequest)]
        started = iter(self.start_many(requests))
        results = []
        for index, item in enumerate(parsed):
            result = item if isinstance(item, ItemResult) else next(started)
            results.append(result.model_copy(update={"index": index}))
        return results

    def start_many(self, requests: Sequence[ExecuteRequest]) -> list[ItemResult]:
        """Start ``requests`` in one transaction: their playbooks resolved through the catalog cache, the
        dedup keys claimed, and every row of every new execution written by one statement, which first
        checks that each cached "latest version" is still the latest (else it writes nothing, and the
        transaction is tried again with the entries read afresh)."""
        try:
            return self._start(requests, use_cache=True)
        except _StaleCatalog as stale:
            self.catalog.cache.forget_latest(stale.paths)
        return self._start(requests, use_cache=False)

    def _start(self, requests: Sequence[ExecuteRequest], *, use_cache: bool) -> list[ItemResult]:
        results: list[ItemResult | None] = [None] * len(requests)
        plans: list[StartPlan] = []
        rows: list[OutboxRow] = []  # published after the commit: events, then command notifications
        # Without start keys the only write is the batch's one statement (the reads before it need no
        # transaction of their own), so it commits by itself: no BEGIN, no COMMIT round trip. It cannot
        # half-apply: every event key it writes begins with its new execution's id, so a reused key means
        # a reused execution id, and the execution row's primary key fails the whole statement. A lone
        # start with a delivery key (the ingress's) and no dedup key claims it in that statement too.
        folded = len(requests) == 1 and requests[0].delivery is not None and requests[0].dedup is None
        writes_once = folded or not any(r.dedup or r.delivery for r in requests)
        with one_statement(self.engine) if writes_once else self.engine.begin() as conn:
            entries, guarded = self._resolve_all(conn, requests, use_cache)
            parents = self._parents(conn, requests)
            for index, request in enumerate(requests):
                try:
                    plans.append(self._plan(index, request, entries, parents))
                except NoetlError as exc:
                    results[index] = _error(index, exc)
            if not folded:
                plans = self._claim_dedup(conn, plans, results, rows)
            batch = InsertBatch()
            if plans:
                self._write(conn, batch, plans, rows)
            used = [e for e in guarded if any(p.entry is e for p in plans)]
            guard, params = CatalogCache.guard(used, *self.tenant)
            claimed_at = utc_now()
            if folded and plans:
                self._claim_in(batch, plans[0], guard, params, claimed_at)
                guard, params = "TRUE", {}
            if not run_batch(conn, batch, guard=guard, params=params):
                if not (folded and plans and self._held_elsewhere(conn, plans[0], results, claimed_at)):
                    raise _StaleCatalog({e.path for e in used})
                plans = []
        for plan in plans:
            results[plan.index] = ItemResult(
                index=plan.index, status="started", execution_id=str(plan.execution_id), execution_pool=plan.pool
            )
        self.relay.hand_off(rows)
        return [r for r in results if r is not None]

    def _resolve_all(
        self, conn: Connection, requests: Sequence[ExecuteRequest], use_cache: bool
    ) -> tuple[dict[CatalogKey, CatalogEntry | NoetlError], list[CatalogEntry]]:
        """The playbook each distinct catalog key names (or its error), and the cached "latest" entries
        the write must guard (read from the database when ``use_cache`` is off)."""
        entries: dict[CatalogKey, CatalogEntry | NoetlError] = {}
        guarded: list[CatalogEntry] = []
        for request in requests:
            key = (request.path, request.version, request.catalog_id)
            if key in entries:
                continue
            try:
                entry, guard = self.catalog.resolve(conn, key) if use_cache else (self.catalog.read(conn, key), False)
            except NotFound as exc:
                entries[key] = NotFound(exc.message, code="playbook_not_found") if key[2] is None else exc
                continue
            if entry.kind != "Playbook":
                message = f"{entry.path} is a {entry.kind}, not a Playbook"
                entries[key] = ValidationFailed(message, code="not_a_playbook")
                continue
            entries[key] = entry
            if guard:
                guarded.append(entry)
        return entries, guarded

    def _plan(
        self,
        index: int,
        request: ExecuteRequest,
        entries: dict[CatalogKey, CatalogEntry | NoetlError],
        parents: dict[int, tuple[dict[str, str] | None, str]],
    ) -> StartPlan:
        entry = entries[(request.path, request.version, request.catalog_id)]
        if isinstance(entry, NoetlError):
            raise entry
        parent = parents.get(int(request.parent_execution_id)) if request.parent_execution_id else None
        # A child playbook runs on its parent's pool unless the request names one.
        pool = request.execution_pool or (parent[1] if parent is not None else self.default_pool)
        if pool not in self.pools:
            raise ValidationFailed(
                f"execution pool {pool!r} is not configured (pools: {', '.join(self.pools)})", code="unknown_pool"
            )
        trace = self._trace(request, parents)
        plan = StartPlan(
            index=index,
            request=request,
            entry=entry,
            pool=pool,
            trace=trace,
            execution_id=self.ids.next_id(),
            step=entry_step(entry.document),
        )
        plan.keys = start_keys(request, *self.tenant)
        return plan

    @staticmethod
    def _trace(request: ExecuteRequest, parents: dict[int, tuple[dict[str, str] | None, str]]) -> dict[str, str] | None:
        if request.trace is not None:
            parsed = TraceContext.parse(request.trace.traceparent, request.trace.tracestate, request.trace.baggage)
            if parsed is not None:
                return parsed.to_dict()
        if request.parent_execution_id is not None:
            parent = parents.get(int(request.parent_execution_id))
            return parent[0] if parent is not None else None
        return telemetry.current_trace_dict()  # tracing: the execution continues the request's trace

    def _parents(
        self, conn: Connection, requests: Sequence[ExecuteRequest]
    ) -> dict[int, tuple[dict[str, str] | None, str]]:
        """The trace and pool of each parent execution named by ``requests``."""
        ids = {int(r.parent_execution_id) for r in requests if r.parent_execution_id}
        if not ids:
            return {}
        rows = _PARENTS(conn, {"ids": sorted(ids)})
        return {r.execution_id: (r.trace, r.execution_pool) for r in rows}

    # -- the writes (the dedup window's claims: control/start_dedup.py) ------------------------

    def _write(self, conn: Connection, batch: InsertBatch, plans: list[StartPlan], outbox: list[OutboxRow]) -> None:
        """The first turn of each new execution: ``playbook.started``, then the entry token's admission,
        ``step.started`` and its commands (or an immediate end), as parts of ``batch``; the outbox rows
        written go to ``outbox`` when it has run (events first, then command notifications)."""
        tenant, org = self.tenant
        execution_rows: list[dict[str, Any]] = []
        turns: list[Turn] = []
        for plan in plans:
            request, entry = plan.request, plan.entry
            eid = str(plan.execution_id)
            doc_workload = self.orchestrator.playbook_for(int(entry.catalog_id), entry.content).workload
            state = ExecState(
                execution_id=eid,
                tenant_id=tenant,
                organization_id=org,
                pool=plan.pool,
                path=entry.path,
                catalog_id=int(entry.catalog_id),
                trace=plan.trace,
                workload=merge_workload(doc_workload, request.workload),
            )
            turn = Turn(self.orchestrator, state, self.orchestrator.plans_for(int(entry.catalog_id), entry.content))
            meta = {**request.meta, "execution_pool": plan.pool}
            if request.parent_execution_id:
                meta["parent_execution_id"] = request.parent_execution_id
            turn.emit(
                "playbook.started",
                {
                    "path": entry.path,
                    "version": entry.version,
                    "catalog_id": entry.catalog_id,
                    "workload": request.workload,
                    "entry_step": plan.step,
                },
                meta=meta,
                key=turn.key("playbook.started"),
            )
            directives = request.meta.get("directives")
            if isinstance(directives, dict) and directives.get("applied"):
                # RFC §7.6: which directives steered this message, in the execution's own stream.
                turn.emit("subscription.message.directives_applied", directives)
            turn.fire(plan.step, {})
            turn.drain()
            turn.close(0)
            turns.append(turn)
            execution_rows.append(
                {
                    "execution_id": plan.execution_id,
                    "tenant_id": tenant,
                    "organization_id": org,
                    "catalog_id": int(entry.catalog_id),
                    "path": entry.path,
                    "version": entry.version,
                    "status": state.status,
                    "execution_pool": plan.pool,
                    "parent_execution_id": int(request.parent_execution_id) if request.parent_execution_id else None,
                    "trace": plan.trace,
                    "meta": request.meta,
                    "workload": state.workload,
                    "ctx": state.ctx,
                    "results": state.results,
                    "error": state.error,
                    "tokens_fired": state.tokens_fired,
                    "ended_at": utc_now() if state.ended else None,
                }
            )
        batch.insert(execution, execution_rows)
        self.store.append_new_streams_to(conn, batch, [(turn.stream, turn.events) for turn in turns], outbox=outbox)
        self.orchestrator.write_rows_to(batch, turns, outbox)

    # -- read and cancel ----------------------------------------------------------------------

    def get(self, execution_id: int) -> dict[str, Any]:
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            row = conn.execute(
                select(execution).where(
                    execution.c.execution_id == execution_id,
                    execution.c.tenant_id == tenant,
                    execution.c.organization_id == org,
                )
            ).first()
            if row is None:
                raise NotFound(f"no execution {execution_id}", code="execution_not_found")
            count = conn.execute(
                select(func.count()).select_from(event).where(event.c.execution_id == execution_id)
            ).scalar_one()
        m = row._mapping
        return {
            "execution_id": str(m["execution_id"]),
            "path": m["path"],
            "version": m["version"],
            "catalog_id": str(m["catalog_id"]) if m["catalog_id"] else None,
            "status": m["status"],
            "execution_pool": m["execution_pool"],
            "parent_execution_id": str(m["parent_execution_id"]) if m["parent_execution_id"] else None,
            "trace": m["trace"],
            "meta": m["meta"],
            "created_at": m["created_at"].isoformat(),
            "updated_at": m["updated_at"].isoformat(),
            "ended_at": m["ended_at"].isoformat() if m["ended_at"] else None,
            "event_count": count,
            "workload": m["workload"],
            "ctx": m["ctx"],
            "results": m["results"],
            "error": m["error"],
        }

    def events_of(self, execution_id: int) -> list[EventEnvelope]:
        self.get(execution_id)  # 404 for an execution of another tenant or none at all
        tenant, org = self.tenant
        return self.store.read_execution(str(execution_id), tenant_id=tenant, organization_id=org)

    def cancel(self, execution_id: int, reason: str | None = None) -> dict[str, Any]:
        tenant, org = self.tenant
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            row = conn.execute(
                select(execution.c.status)
                .where(
                    execution.c.execution_id == execution_id,
                    execution.c.tenant_id == tenant,
                    execution.c.organization_id == org,
                )
                .with_for_update()
            ).first()
            if row is None:
                raise NotFound(f"no execution {execution_id}", code="execution_not_found")
            if row.status == "cancelled":
                return {"execution_id": str(execution_id), "status": "cancelled", "changed": False}
            if row.status in TERMINAL:
                raise Conflict(
                    f"execution {execution_id} already ended ({row.status})",
                    code="execution_terminal",
                    details={"status": row.status},
                )
            conn.execute(
                execution.update()
                .where(execution.c.execution_id == execution_id)
                .values(status="cancelled", updated_at=func.now(), ended_at=func.now())
            )
            stream = f"execution/{execution_id}"
            self.store.append_in(
                conn,
                stream,
                [
                    self.events.new(
                        "execution.cancelled",
                        stream_id=stream,
                        aggregate_type="execution",
                        aggregate_id=str(execution_id),
                        execution_id=str(execution_id),
                        payload={"reason": reason} if reason else {},
                        idempotency_key=f"{tenant}/{org}/{execution_id}/execution.cancelled",
                    )
                ],
                outbox=rows,
            )
        self.relay.hand_off(rows)
        return {"execution_id": str(execution_id), "status": "cancelled", "changed": True}
