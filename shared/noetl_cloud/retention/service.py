"""Retention (docs/retention.md): keep partitions ahead, archive and remove expired executions, drop
partitions nothing live needs.

One :meth:`RetentionService.sweep` (``POST /api/internal/retention``, run by Cloud Scheduler):

1. creates the daily partitions of ``event`` and ``outbox`` for today and the days ahead;
2. archives up to ``retention_batch`` expired executions, oldest first: terminal, ended longer ago
   than their policy's days (``retention_policy`` of the organization, else of the tenant (``'*'``),
   else ``NOETL_RETENTION_DAYS``), with no running parent or child and no unexpired dedup key naming
   them. Each in its own transaction, under the execution row's lock: its events go to a Parquet
   object in the archive store (stored before anything is removed), an ``execution_archive`` row
   records where, then its projections, snapshots, commands, loop runs, stages, frames and the
   execution row are deleted. A running execution is never a candidate;
3. drops each daily partition of ``event`` whose day ended longer ago than the default retention and
   that holds no event of an execution still live (not yet archived), with its ``event_key`` rows;
   events of no execution in it are archived first (one Parquet object of the deployment's tenant);
4. drops each ``outbox`` partition older than a day that holds no row still to publish.

Every step is idempotent: a sweep that dies half way is finished by the next.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.envelope import utc_now
from noetl_cloud.eventlog.keys import KEY_DIGEST_SQL
from noetl_cloud.eventlog.stored import KEY_TEXT_SQL, STREAM_TEXT_SQL
from noetl_cloud.retention import archive, partitions
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

_POLICY_DAYS = (
    "coalesce((SELECT retention_days FROM retention_policy p WHERE p.tenant_id = x.tenant_id "
    "AND p.organization_id = x.organization_id), (SELECT retention_days FROM retention_policy p "
    "WHERE p.tenant_id = x.tenant_id AND p.organization_id = '*'), :default_days)"
)
_POLICY_ARCHIVE = (
    "coalesce((SELECT archive FROM retention_policy p WHERE p.tenant_id = x.tenant_id "
    "AND p.organization_id = x.organization_id), (SELECT archive FROM retention_policy p "
    "WHERE p.tenant_id = x.tenant_id AND p.organization_id = '*'), :default_archive)"
)
# Terminal, past its policy, nothing live depends on it. The first ``ended_at`` bound (the shortest
# policy) lets the partial index on ``ended_at`` cut the scan.
_EXPIRED = text(
    f"SELECT x.execution_id, {_POLICY_ARCHIVE} AS archive FROM execution x "
    "WHERE x.ended_at IS NOT NULL AND x.status IN ('completed', 'failed', 'cancelled') "
    "AND x.ended_at < CAST(:now AS timestamptz) - make_interval(days => :min_days) "
    f"AND x.ended_at < CAST(:now AS timestamptz) - make_interval(days => {_POLICY_DAYS}) "
    "AND NOT EXISTS (SELECT 1 FROM execution c WHERE c.parent_execution_id = x.execution_id AND c.ended_at IS NULL) "
    "AND NOT EXISTS (SELECT 1 FROM execution p WHERE p.execution_id = x.parent_execution_id AND p.ended_at IS NULL) "
    "AND NOT EXISTS (SELECT 1 FROM subscription_dedup d WHERE d.execution_id = x.execution_id "
    "AND d.expires_at > CAST(:now AS timestamptz)) "
    "ORDER BY x.ended_at LIMIT :limit"
)
_LOCK = text(
    "SELECT execution_id, tenant_id, organization_id, path, status, created_at, ended_at FROM execution "
    "WHERE execution_id = :e AND ended_at IS NOT NULL FOR UPDATE"
)
# The digest of a stored key (noetl_cloud.eventlog.stored: relative to its execution) of an ``event`` row ``e``.
_KEY_DIGEST = KEY_DIGEST_SQL.format(
    k=KEY_TEXT_SQL.format(k="e.idempotency_key", t="e.tenant_id", o="e.organization_id", x="e.execution_id"),
    x="e.execution_id",
)
_EVENTS = text(f"SELECT {', '.join(archive.COLUMNS)} FROM event WHERE execution_id = :e ORDER BY position")
_RECORD = text(
    "INSERT INTO execution_archive (tenant_id, organization_id, execution_id, path, status, event_count, "
    "last_position, archive_ref, execution_created_at, ended_at) VALUES (:t, :o, :e, :path, :status, :n, :last, "
    "CAST(:ref AS jsonb), :created, :ended) ON CONFLICT (execution_id) DO NOTHING"
)
# Children first (foreign keys); ``event`` rows leave with their partition.
_REMOVE = tuple(
    text(sql)
    for sql in (
        "DELETE FROM frame WHERE execution_id = :e",
        "DELETE FROM stage WHERE execution_id = :e",
        "DELETE FROM loop_run WHERE execution_id = :e",
        "DELETE FROM command WHERE execution_id = :e",
        "DELETE FROM projection WHERE execution_id = :e",
        "DELETE FROM projection_tracking WHERE execution_id = :e",
        "DELETE FROM projection_snapshot WHERE execution_id = :e",
        "DELETE FROM subscription_dedup WHERE execution_id = :e",
        # The heads of its streams: nothing appends to a removed execution (its events stay until their
        # partition is dropped, so their stream ids are still known here).
        "DELETE FROM stream WHERE stream_id IN (SELECT DISTINCT "
        + STREAM_TEXT_SQL.format(s="stream_id", x="execution_id")
        + " FROM event WHERE execution_id = :e)",
        "DELETE FROM execution WHERE execution_id = :e",
    )
)
_MIN_DAYS = text(
    "SELECT least(CAST(:default_days AS int), "
    "coalesce((SELECT min(retention_days) FROM retention_policy), :default_days))"
)


class RetentionService:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings

    def sweep(self, now: datetime | None = None) -> dict[str, Any]:
        """One pass of the four steps; what it did (the body of ``POST /api/internal/retention``)."""
        now = now or utc_now()
        with self.engine.begin() as conn:
            created = partitions.ensure_ahead(conn, self.settings.partition_days_ahead, now)
        archived, kept = self.archive_expired(now)
        dropped = self.drop_partitions(now)
        return {
            "partitions_created": created,
            "archived": archived,
            "not_archived": kept,
            "partitions_dropped": dropped,
            "rerun_operations_removed": self.remove_rerun_operations(now),
        }

    def remove_rerun_operations(self, now: datetime) -> int:
        """Delete the records of bulk re-runs (control/bulk_reruns.py) that ended more than
        ``NOETL_RETENTION_DAYS`` ago; their re-runs are executions, kept by their own retention."""
        with self.engine.begin() as conn:
            removed = conn.execute(
                text("DELETE FROM rerun_operation WHERE state <> 'running' AND finished_at < :cutoff"),
                {"cutoff": now - timedelta(days=self.settings.retention_days)},
            )
        return int(removed.rowcount)

    # -- executions -------------------------------------------------------------------------------

    def archive_expired(self, now: datetime) -> tuple[int, int]:
        """Archive and remove up to ``retention_batch`` expired executions: (archived, left for later)."""
        params = {
            "now": now,
            "default_days": self.settings.retention_days,
            "default_archive": self.settings.retention_archive,
            "limit": self.settings.retention_batch,
        }
        with self.engine.connect() as conn:
            params["min_days"] = int(conn.execute(_MIN_DAYS, params).scalar_one())
            candidates = conn.execute(_EXPIRED, params).all()
        done = left = 0
        for execution_id, keep_archive in candidates:
            if self.archive_one(int(execution_id), archive_events=bool(keep_archive)):
                done += 1
            else:
                left += 1
        return done, left

    def archive_one(self, execution_id: int, *, archive_events: bool = True) -> bool:
        """Archive one terminal execution and remove its rows; false when it is not (or no longer) there,
        or its archive cannot be written (then nothing is removed)."""
        with self.engine.begin() as conn:
            row = conn.execute(_LOCK, {"e": execution_id}).one_or_none()
            if row is None:
                return False
            events = [dict(r._mapping) for r in conn.execute(_EVENTS, {"e": execution_id})]
            ref = None
            if archive_events and events:
                store = archive.archive_store(self.settings, row.tenant_id, row.organization_id)
                if store is None:
                    log.warning("execution %s expired but no archive store is configured: kept", execution_id)
                    return False
                ref = store.store(archive.encode(events), archive.MEDIA_TYPE).model_dump_json()
            conn.execute(
                _RECORD,
                {
                    "t": row.tenant_id,
                    "o": row.organization_id,
                    "e": execution_id,
                    "path": row.path,
                    "status": row.status,
                    "n": len(events),
                    "last": max((int(e["position"]) for e in events), default=0),
                    "ref": ref,
                    "created": row.created_at,
                    "ended": row.ended_at,
                },
            )
            for statement in _REMOVE:
                conn.execute(statement, {"e": execution_id})
        return True

    # -- partitions -------------------------------------------------------------------------------

    def drop_partitions(self, now: datetime) -> list[str]:
        """Drop the partitions retention no longer needs; their names."""
        dropped = []
        event_cutoff = now - timedelta(days=self.settings.retention_days)
        with self.engine.connect() as conn:
            listed = partitions.partitions(conn, "event") + partitions.partitions(conn, "outbox")
        for partition in listed:
            if partition.ends is None:
                continue
            cutoff = event_cutoff if partition.table == "event" else now - timedelta(days=1)
            if partition.ends > cutoff or partition.ends > partitions.day_start(now):
                continue
            with self.engine.begin() as conn:
                if partition.table == "event" and self._retire_events(conn, partition):
                    dropped.append(partition.name)
                elif partition.table == "outbox" and self._retire_outbox(conn, partition):
                    dropped.append(partition.name)
        return dropped

    def _retire_events(self, conn: Connection, partition: partitions.Partition) -> bool:
        name = partition.name
        # Writers wait for the check and the drop (a late event of a past day could land here); readers
        # do not, until DROP takes its brief exclusive lock.
        conn.execute(text(f'LOCK TABLE "{name}" IN SHARE MODE'))
        live = conn.execute(
            text(f'SELECT 1 FROM "{name}" e JOIN execution x ON x.execution_id = e.execution_id LIMIT 1')
        ).first()
        if live is not None:
            return False  # an execution still live (running, or not yet expired) has events here
        loose = [
            dict(r._mapping)
            for r in conn.execute(
                text(
                    f'SELECT {", ".join(archive.COLUMNS)} FROM "{name}" e WHERE NOT EXISTS '
                    "(SELECT 1 FROM execution_archive a WHERE a.execution_id = e.execution_id) ORDER BY position"
                )
            )
        ]
        if loose and self.settings.retention_archive:
            store = archive.archive_store(self.settings, self.settings.tenant_id, self.settings.organization_id)
            if store is None:
                log.warning(
                    "partition %s holds %d events of no execution and no archive store is set: kept", name, len(loose)
                )
                return False
            ref = store.store(archive.encode(loose), archive.MEDIA_TYPE)
            log.info("partition %s: %d events of no live execution archived at %s", name, len(loose), ref.uri)
        conn.execute(
            text(
                f'DELETE FROM event_key k USING "{name}" e '
                f"WHERE e.idempotency_key IS NOT NULL AND k.key_digest = {_KEY_DIGEST} AND k.event_id = e.event_id"
            )
        )
        partitions.drop(conn, partition)
        return True

    @staticmethod
    def _retire_outbox(conn: Connection, partition: partitions.Partition) -> bool:
        name = partition.name
        conn.execute(text(f'LOCK TABLE "{name}" IN SHARE MODE'))
        pending = conn.execute(
            text(f"SELECT 1 FROM \"{name}\" WHERE status IN ('pending', 'in_flight') LIMIT 1")
        ).first()
        if pending is not None:
            return False
        failed = conn.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one()
        if failed:
            log.warning("outbox partition %s dropped with %d failed rows", name, failed)
        partitions.drop(conn, partition)
        return True
