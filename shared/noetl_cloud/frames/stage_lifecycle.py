"""Stages over their life: opened outside an orchestrated loop, read with their frame counts, closed once
drained (or cancelled by the reaper when their execution ended), and the backlog gauge over open stages."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.db.bulk import insert_rows
from noetl_cloud.db.schema import stage as stage_table
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.frames.errors import StageNotFound, StageNotOpen
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.rows import iso, stage_opened_payload, stage_row
from noetl_cloud.frames.streams import FrameStreams


class StageLifecycle(FrameStreams):
    """Opening, reading and closing stages; the backlog."""

    # -- stages ---------------------------------------------------------------------------------

    def open_stage(
        self,
        execution_id: int,
        step_name: str,
        policy: FramePolicy,
        *,
        frame_limit: int | None = None,
        kind: str = "loop",
        dsl_ref: str | None = None,
        step_run_id: int | None = None,
    ) -> dict[str, Any]:
        """Open a stage outside an orchestrated loop (tests, benchmarks, tools): its row and ``stage.opened``."""
        tenant, org = self.tenant
        stage_id = self.ids.next_id()
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            event = self.events.new(
                "stage.opened",
                stream_id=f"execution/{execution_id}",
                aggregate_type="stage",
                aggregate_id=str(stage_id),
                execution_id=str(execution_id),
                payload=stage_opened_payload(stage_id, kind, step_name, policy, frame_limit),
                idempotency_key=self._key(execution_id, "stage", stage_id, "opened"),
            )
            insert_rows(
                conn,
                stage_table,
                [
                    stage_row(
                        stage_id,
                        execution_id,
                        tenant,
                        org,
                        step_name,
                        policy,
                        opened_event_id=int(event.event_id),
                        kind=kind,
                        dsl_ref=dsl_ref,
                        step_run_id=step_run_id,
                        frame_limit=frame_limit,
                    )
                ],
            )
            self.store.append_in(conn, event.stream_id, [event], outbox=rows)
        self._publish(rows)
        return {"stage_id": str(stage_id), "opened_event_id": event.event_id}

    def stage(self, stage_id: int) -> dict[str, Any]:
        """A stage with its frame counts."""
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT s.stage_id, s.execution_id, s.step_name, s.kind, s.status, s.frame_policy, s.frame_limit, "
                    "s.next_frame_index, s.exhausted, s.frames_failed, s.opened_event_id, s.closed_event_id, "
                    "s.started_at, s.ended_at, "
                    "(SELECT count(*) FROM frame f WHERE f.stage_id = s.stage_id AND f.status = 'COMMITTED') "
                    "  AS committed, "
                    "(SELECT count(*) FROM frame f WHERE f.stage_id = s.stage_id "
                    "  AND f.status IN ('PENDING', 'CLAIMED', 'RUNNING')) AS open, "
                    "(SELECT coalesce(sum(row_count), 0) FROM frame f WHERE f.stage_id = s.stage_id "
                    "  AND f.status = 'COMMITTED') AS rows "
                    "FROM stage s WHERE s.stage_id = :s AND s.tenant_id = :t AND s.organization_id = :o"
                ),
                {"s": stage_id, "t": tenant, "o": org},
            ).first()
        if row is None:
            raise StageNotFound(f"no stage {stage_id}")
        return {
            "stage_id": str(row.stage_id),
            "execution_id": str(row.execution_id),
            "step_name": row.step_name,
            "kind": row.kind,
            "status": row.status,
            "frame_policy": row.frame_policy,
            "frame_limit": row.frame_limit,
            "frames_minted": row.next_frame_index,
            "exhausted": row.exhausted,
            "frames_committed": int(row.committed),
            "frames_failed": row.frames_failed,
            "frames_open": int(row.open),
            "rows_committed": int(row.rows),
            "opened_event_id": None if row.opened_event_id is None else str(row.opened_event_id),
            "closed_event_id": None if row.closed_event_id is None else str(row.closed_event_id),
            "started_at": iso(row.started_at),
            "ended_at": iso(row.ended_at),
        }

    def _stage_row(self, conn: Connection, stage_id: int) -> Any:
        """This tenant's stage ``stage_id``, or :class:`StageNotFound`."""
        tenant, org = self.tenant
        row = conn.execute(
            text(
                "SELECT stage_id, execution_id, status, frame_policy, frame_limit, next_frame_index, exhausted, "
                "step_name, dsl_ref FROM stage WHERE stage_id = :s AND tenant_id = :t AND organization_id = :o"
            ),
            {"s": stage_id, "t": tenant, "o": org},
        ).first()
        if row is None:
            raise StageNotFound(f"no stage {stage_id}")
        return row

    def _stage_for_claim(self, conn: Connection, stage_id: int) -> Any:
        row = self._stage_row(conn, stage_id)
        if row.status != "OPEN":
            raise StageNotOpen(f"stage {stage_id} is {row.status}", details={"status": row.status})
        return row

    # -- closing stages -------------------------------------------------------------------------

    def close_if_done(self, stage_id: int) -> str | None:
        """Close the stage when its cursor is exhausted (or its frame limit reached) and no frame is open.

        Runs after the caller's commit, in its own transaction, so the last committer of a stage always
        sees every other commit; the close itself is a compare-and-set on ``status = 'OPEN'``.
        """
        outbox: list[OutboxRow] = []
        with self.engine.begin() as conn:
            row = conn.execute(
                text(
                    "SELECT stage_id, execution_id, status, exhausted, frame_limit, next_frame_index, frames_failed "
                    "FROM stage WHERE stage_id = :s"
                ),
                {"s": stage_id},
            ).one()
            done = row.exhausted or (row.frame_limit is not None and row.next_frame_index >= row.frame_limit)
            if row.status != "OPEN" or not done:
                return None
            still_open = conn.execute(
                text("SELECT 1 FROM frame WHERE stage_id = :s AND status IN ('PENDING', 'CLAIMED', 'RUNNING') LIMIT 1"),
                {"s": stage_id},
            ).first()
            if still_open is not None:
                return None
            status = "FAILED" if row.frames_failed else "COMPLETED"
            closed = self._close(conn, row, status, "drained", outbox)
        self._publish(outbox)
        return status if closed else None

    def _close(self, conn: Connection, row: Any, status: str, reason: str, outbox: list[OutboxRow]) -> bool:
        counts = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE status = 'COMMITTED') AS committed, "
                "count(*) FILTER (WHERE status = 'FAILED') AS failed, "
                "coalesce(sum(row_count) FILTER (WHERE status = 'COMMITTED'), 0) AS rows, "
                "coalesce(sum(events_emitted), 0) AS emitted FROM frame WHERE stage_id = :s"
            ),
            {"s": int(row.stage_id)},
        ).one()
        event = self.events.new(
            "stage.closed",
            stream_id=f"execution/{row.execution_id}",
            aggregate_type="stage",
            aggregate_id=str(row.stage_id),
            execution_id=str(row.execution_id),
            payload={
                "stage_id": str(row.stage_id),
                "status": status,
                "reason": reason,
                "frames_committed": int(counts.committed),
                "frames_failed": int(counts.failed),
                "rows": int(counts.rows),
                "events_emitted": int(counts.emitted),
            },
            idempotency_key=self._key(int(row.execution_id), "stage", row.stage_id, "closed"),
        )
        updated = conn.execute(
            text(
                "UPDATE stage SET status = :status, ended_at = now(), closed_event_id = :event "
                "WHERE stage_id = :s AND status = 'OPEN' RETURNING stage_id"
            ),
            {"status": status, "event": int(event.event_id), "s": int(row.stage_id)},
        ).first()
        if updated is None:
            return False
        self.store.append_in(conn, event.stream_id, [event], outbox=outbox)
        return True

    # -- metrics --------------------------------------------------------------------------------

    def backlog(self) -> dict[str, int]:
        """Claimable work (``noetl_frame_backlog_total``): pending frames, expired leases, and the frames
        open stages may still mint (their remaining limit, or one for a stage whose cursor is not
        exhausted and that has no limit)."""
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT "
                    "(SELECT count(*) FROM frame WHERE tenant_id = :t AND organization_id = :o "
                    "  AND (status = 'PENDING' OR (status IN ('CLAIMED', 'RUNNING') AND lease_until < now()))) "
                    "  AS claimable, "
                    "(SELECT count(*) FROM frame WHERE tenant_id = :t AND organization_id = :o "
                    "  AND status IN ('CLAIMED', 'RUNNING') AND lease_until >= now()) AS leased, "
                    "(SELECT coalesce(sum(CASE WHEN frame_limit IS NULL THEN 1 "
                    "  ELSE greatest(frame_limit - next_frame_index, 0) END), 0) FROM stage "
                    "  WHERE tenant_id = :t AND organization_id = :o AND status = 'OPEN' AND NOT exhausted) "
                    "  AS mintable, "
                    "(SELECT count(*) FROM stage WHERE tenant_id = :t AND organization_id = :o AND status = 'OPEN') "
                    "  AS stages_open"
                ),
                {"t": tenant, "o": org},
            ).one()
        return {
            "backlog": int(row.claimable) + int(row.mintable),
            "claimable": int(row.claimable),
            "mintable": int(row.mintable),
            "leased": int(row.leased),
            "stages_open": int(row.stages_open),
        }
