"""The reaper (Cloud Scheduler): does to expired leases what a claim would, without waiting for one, and
closes the stages of executions that ended."""

from __future__ import annotations

from sqlalchemy import text

from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.frames.claims import Claims
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.rows import FRAME_COLUMNS


class Reaper(Claims):
    """Expired leases released or failed; stages of ended executions cancelled."""

    # -- reaper ---------------------------------------------------------------------------------

    def reap(self, limit: int | None = None) -> dict[str, int]:
        """Release expired leases (abandon, or fail after ``max_attempts``), close stages of ended executions."""
        tenant, org = self.tenant
        budget = limit or self.reaper_limit
        counts = {"expired": 0, "released": 0, "failed": 0, "stages_closed": 0}
        touched: set[int] = set()
        while budget > 0:
            outbox: list[OutboxRow] = []
            with self.engine.begin() as conn:
                rows = list(
                    conn.execute(
                        text(
                            f"SELECT {FRAME_COLUMNS}, s.frame_policy FROM frame f "
                            "JOIN stage s ON s.stage_id = f.stage_id "
                            "WHERE f.status IN ('CLAIMED', 'RUNNING') AND f.lease_until < now() "
                            "AND f.tenant_id = :t AND f.organization_id = :o "
                            "ORDER BY f.lease_until LIMIT :n FOR UPDATE OF f SKIP LOCKED"
                        ),
                        {"t": tenant, "o": org, "n": min(budget, 100)},
                    )
                )
                events: list[EventEnvelope] = []
                released: list[int] = []
                for row in rows:
                    policy = FramePolicy.model_validate(row.frame_policy)
                    abandoned = self._abandoned(row, policy, reclaimer="reaper")
                    events.append(abandoned)
                    touched.add(int(row.stage_id))
                    if row.attempts >= policy.max_attempts:
                        events.append(self._fail_exhausted(conn, row, policy, abandoned))
                        counts["failed"] += 1
                    else:
                        released.append(int(row.frame_id))
                if released:
                    conn.execute(
                        text(
                            "UPDATE frame SET status = 'PENDING', owner_worker = NULL, lease_until = NULL "
                            "WHERE frame_id = ANY(CAST(:ids AS bigint[]))"
                        ),
                        {"ids": released},
                    )
                self._append(conn, events, outbox)
            self._publish(outbox)
            counts["expired"] += len(rows)
            counts["released"] += len(released)
            budget -= len(rows)
            if len(rows) < 100:
                break
        for stage_id in touched:
            if self.close_if_done(stage_id):
                counts["stages_closed"] += 1
        counts["stages_closed"] += self._close_orphans()
        return counts

    def _close_orphans(self) -> int:
        """Stages still open whose execution ended: ``CANCELLED``, and their open frames failed."""
        tenant, org = self.tenant
        closed = 0
        with self.engine.connect() as conn:
            stages = list(
                conn.execute(
                    text(
                        "SELECT s.stage_id FROM stage s JOIN execution e ON e.execution_id = s.execution_id "
                        "WHERE s.status = 'OPEN' AND s.tenant_id = :t AND s.organization_id = :o "
                        "AND e.status IN ('completed', 'failed', 'cancelled') LIMIT 100"
                    ),
                    {"t": tenant, "o": org},
                ).scalars()
            )
        for stage_id in stages:
            outbox: list[OutboxRow] = []
            with self.engine.begin() as conn:
                row = conn.execute(
                    text(
                        "SELECT stage_id, execution_id, status FROM stage WHERE stage_id = :s AND status = 'OPEN' "
                        "FOR UPDATE"
                    ),
                    {"s": stage_id},
                ).first()
                if row is not None and self._close(conn, row, "CANCELLED", "execution_ended", outbox):
                    closed += 1
            self._publish(outbox)
        return closed
