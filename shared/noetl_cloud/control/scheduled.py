"""Scheduled subscriptions (Mode A, ``activation: scheduled``): the execute role's subscription tick.

``POST /api/internal/subscriptions/tick`` is a job of the one maintenance schedule
(:mod:`noetl_cloud.maintenance.schedule`, ``subscription-tick``): Cloud Scheduler calls it every
minute in the cloud, the local stack's scheduler every few seconds. Each tick reads the scheduled
subscriptions from the catalog and the lifecycle (:func:`~noetl_cloud.runtime.schedule.scheduled_jobs`:
subscriptions are registered at runtime, so nothing is generated ahead of time) and, for each
``active`` one whose cadence has a slot due, runs that slot once:

1. **claim** the slot: insert ``(subscription_id, due_at)`` into ``subscription_schedule_run``; a
   second tick that sees the same slot due (two Cloud Scheduler attempts, two local schedulers, an
   overlapping slow tick) finds the row and skips it. Only the latest due slot runs: slots missed
   while the tick did not run (or before the subscription became active, ``since``) are coalesced;
2. **poll** the source once (the subscription tool's bounded pull: ``runtime.batch`` messages within
   ``runtime.timeout_ms``) and plan each message as the runtime does (directives, dedup, trace);
3. **dispatch** the messages in one batch of executions of ``dispatch.playbook`` (parent: the
   subscription id); **ack** each one that started or was a duplicate, **nack** the others (the
   source keeps them for the next slot or its dead-letter policy). Nothing is acked before the
   control plane took it.

``paused``, ``draining``, ``deactivated`` and never-activated subscriptions give no job and so never
run; a run already started when a subscription is paused finishes its one bounded batch. A tick that
dies after its claim leaves the slot ``running`` and unrun: the messages stay in the source and the
next slot takes them. Run rows older than a day are removed by the tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from noetl_cloud.control.catalog import CatalogService
from noetl_cloud.control.executions import ExecutionService
from noetl_cloud.control.lifecycle import SubscriptionService
from noetl_cloud.db.schema import subscription_schedule_run as runs
from noetl_cloud.ingress.push import BadMessage
from noetl_cloud.runtime.message import prepare
from noetl_cloud.runtime.schedule import SubscriptionJob, latest_due, next_due, scheduled_jobs
from noetl_cloud.tools.subscription import SubscriptionTool

log = logging.getLogger(__name__)

#: Subscriptions polled at once by one tick.
PARALLEL = 4
#: How long a run row is kept.
KEEP = timedelta(days=1)


def _parse(iso: str | None) -> datetime | None:
    if not iso:
        return None
    parsed = datetime.fromisoformat(iso)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class ScheduledSubscriptions:
    """Runs the due slots of scheduled subscriptions; reports the schedule."""

    def __init__(
        self,
        engine: Engine,
        catalog: CatalogService,
        subscriptions: SubscriptionService,
        executions: ExecutionService,
        *,
        tenant: tuple[str, str],
        tool: SubscriptionTool | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.engine = engine
        self.catalog = catalog
        self.subscriptions = subscriptions
        self.executions = executions
        self.tenant_id, self.organization_id = tenant
        self.tool = tool or SubscriptionTool()
        self.clock = clock
        # One poll at a time per subscription in this process: a slot claimed while the previous slot's
        # run is still going waits for it (a Kafka consumer, for one, is not to be polled from two threads).
        self._busy: dict[str, threading.Lock] = {}
        self._busy_lock = threading.Lock()

    # -- the tick -------------------------------------------------------------------------------

    def due(self, now: datetime) -> list[tuple[SubscriptionJob, datetime]]:
        """Each active job with its latest slot at or before ``now`` (not before it became active)."""
        found = []
        for job in scheduled_jobs(self.catalog, self.subscriptions).jobs:
            if job.paused:
                continue
            slot = latest_due(job.cadence, now)
            since = _parse(job.since)
            if since is not None and slot < since.replace(microsecond=0):
                continue
            found.append((job, slot))
        return found

    def tick(self, now: datetime | None = None) -> dict[str, Any]:
        """Run every due slot not yet claimed; what ran."""
        now = now or self.clock()
        due = self.due(now)
        claimed = [(job, slot) for job, slot in due if self._claim(job, slot)]
        if claimed:
            with ThreadPoolExecutor(max_workers=min(PARALLEL, len(claimed)), thread_name_prefix="sched") as pool:
                ran = list(pool.map(lambda pair: self.run(*pair), claimed))
        else:
            ran = []
        with self.engine.begin() as conn:
            conn.execute(delete(runs).where(self._scope(), runs.c.due_at < now - KEEP))
        return {"at": now.isoformat(), "due": len(due), "claimed": len(claimed), "runs": ran}

    def _scope(self) -> Any:
        return and_(runs.c.tenant_id == self.tenant_id, runs.c.organization_id == self.organization_id)

    def _claim(self, job: SubscriptionJob, slot: datetime) -> bool:
        with self.engine.begin() as conn:
            row = conn.execute(
                insert(runs)
                .values(
                    subscription_id=int(job.subscription_id),
                    due_at=slot,
                    tenant_id=self.tenant_id,
                    organization_id=self.organization_id,
                    path=job.path,
                    status="running",
                )
                .on_conflict_do_nothing()
                .returning(runs.c.subscription_id)
            ).first()
        return row is not None

    def run(self, job: SubscriptionJob, slot: datetime) -> dict[str, Any]:
        """Poll one subscription once and dispatch what came (the slot is already claimed)."""
        started = time.monotonic()
        counts = {"polled": 0, "started": 0, "duplicates": 0, "failed": 0}
        error: str | None = None
        with self._busy_lock:
            busy = self._busy.setdefault(job.subscription_id, threading.Lock())
        try:
            with busy:
                counts = self._poll_and_dispatch(job)
        except Exception as exc:  # noqa: BLE001 - a failed run is recorded; the source keeps the messages
            log.warning("scheduled subscription run failed", extra={"path": job.path, "error": type(exc).__name__})
            error = f"{type(exc).__name__}: {exc}"[:500]
        with self.engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.subscription_id == int(job.subscription_id), runs.c.due_at == slot)
                .values(status="ok" if error is None else "error", finished_at=func.now(), error=error, **counts)
            )
        return {
            "path": job.path,
            "subscription_id": job.subscription_id,
            "due_at": slot.isoformat(),
            "status": "ok" if error is None else "error",
            "seconds": round(time.monotonic() - started, 3),
            **counts,
            **({"error": error} if error else {}),
        }

    def _poll_and_dispatch(self, job: SubscriptionJob) -> dict[str, int]:
        source = self.tool.source(job.task)
        received = source.fetch(int(job.task["batch"]), int(job.task["timeout_ms"]) / 1000.0)
        counts = {"polled": len(received), "started": 0, "duplicates": 0, "failed": 0}
        held, requests = [], []
        for delivery in received:
            try:
                prepared = prepare(delivery.message, job.spec, subscription_id=job.subscription_id, path=job.path)
            except BadMessage:
                delivery.nack()
                counts["failed"] += 1
                continue
            held.append(delivery)
            requests.append(prepared.request)
        if not requests:
            return counts
        try:
            results = self.executions.start_batch(requests)
        except Exception:
            for delivery in held:
                delivery.nack()
            raise
        for delivery, result in zip(held, results, strict=True):
            if result.status in ("started", "duplicate"):
                delivery.ack()
                counts["started" if result.status == "started" else "duplicates"] += 1
            else:
                delivery.nack()
                counts["failed"] += 1
        return counts

    # -- the report -----------------------------------------------------------------------------

    def report(self, now: datetime | None = None) -> dict[str, Any]:
        """Each scheduled subscription: cadence, state, next slot, last run; and those skipped."""
        now = now or self.clock()
        schedule = scheduled_jobs(self.catalog, self.subscriptions)
        jobs = []
        with self.engine.connect() as conn:
            for job in schedule.jobs:
                last = conn.execute(
                    select(runs)
                    .where(runs.c.subscription_id == int(job.subscription_id))
                    .order_by(runs.c.due_at.desc())
                    .limit(1)
                ).first()
                count = conn.execute(
                    select(func.count()).where(runs.c.subscription_id == int(job.subscription_id))
                ).scalar_one()
                jobs.append(
                    {
                        **job.to_dict(),
                        "state": "paused" if job.paused else "active",
                        "next_due": None if job.paused else next_due(job.cadence, now).isoformat(),
                        "runs": count,
                        "last_run": None if last is None else _run_view(last),
                    }
                )
        return {"at": now.isoformat(), "jobs": jobs, "skipped": schedule.skipped}


def _run_view(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {
        "due_at": m["due_at"].isoformat(),
        "status": m["status"],
        "started_at": m["started_at"].isoformat(),
        "finished_at": m["finished_at"].isoformat() if m["finished_at"] else None,
        **{k: m[k] for k in ("polled", "started", "duplicates", "failed", "error")},
    }
