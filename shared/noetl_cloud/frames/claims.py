"""Claiming frames: pending frames first, then expired leases (``frame.abandoned``, then a new attempt, or
``frame.failed`` after ``max_attempts``), then frames minted at the stage's next boundaries; each claimed
frame gets ``frame.dispatched``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.db.bulk import insert_rows
from noetl_cloud.db.schema import frame as frame_table
from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.frames.models import ClaimRequest
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.rows import FRAME_COLUMNS, as_json, iso
from noetl_cloud.frames.stage_lifecycle import StageLifecycle

# Pending frames first, then expired leases (oldest first): one round trip, on the partial index of
# claimable rows (``ix_frame_claimable``: committed frames are not in it).
_PICK = text(
    f"SELECT {FRAME_COLUMNS} FROM frame f WHERE f.stage_id = :stage AND (f.status = 'PENDING' "
    "OR (f.status IN ('CLAIMED', 'RUNNING') AND f.lease_until < now())) "
    "ORDER BY f.status = 'PENDING' DESC, f.lease_until LIMIT :n FOR UPDATE SKIP LOCKED"
)
_MINT = text(
    "UPDATE stage s SET next_frame_index = s.next_frame_index "
    "  + LEAST(:n, COALESCE(s.frame_limit - s.next_frame_index, :n)) "
    "FROM (SELECT stage_id, next_frame_index FROM stage WHERE stage_id = :stage FOR UPDATE) old "
    "WHERE s.stage_id = old.stage_id AND s.status = 'OPEN' AND NOT s.exhausted "
    "AND (s.frame_limit IS NULL OR s.next_frame_index < s.frame_limit) "
    "RETURNING old.next_frame_index AS first, s.next_frame_index AS stop, now() AS now"
)
_CLAIM_ROWS = text(
    "UPDATE frame f SET status = 'CLAIMED', owner_worker = :worker, attempts = f.attempts + 1, heartbeats = 0, "
    "lease_until = now() + make_interval(secs => :lease), claimed_event_id = v.event_id, "
    "command_id = COALESCE(:command, f.command_id) "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:events AS bigint[])) AS v(frame_id, event_id) "
    "WHERE f.frame_id = v.frame_id RETURNING f.frame_id, f.lease_until"
)


class Claims(StageLifecycle):
    """Leasing frames to workers: pick, recover, mint, dispatch."""

    # -- claim ----------------------------------------------------------------------------------

    def claim(self, stage_id: int, body: ClaimRequest) -> dict[str, Any]:
        """Lease up to ``requested_count`` frames of the stage to ``body.worker_id``.

        One connection, two transactions: the first picks pending and expired frames (and dispatches
        them), then reserves boundaries for the rest as its last statement, so the stage row is locked
        only while that transaction commits; the second inserts the frames minted at those boundaries.
        """
        with self.engine.connect() as conn:
            return self._claim_on(conn, stage_id, body)

    def _claim_on(self, conn: Connection, stage_id: int, body: ClaimRequest) -> dict[str, Any]:
        """:meth:`claim` on a connection the caller holds (outside any transaction of its own)."""
        outbox: list[OutboxRow] = []
        wanted = body.requested_count
        minted: tuple[int, int, datetime] | None = None
        with conn.begin():
            stage = self._stage_for_claim(conn, stage_id)
            policy = FramePolicy.model_validate(stage.frame_policy)
            lease = body.lease_seconds or policy.lease_seconds
            picked: list[Any] = []
            recovered: list[tuple[Any, EventEnvelope]] = []
            events: list[EventEnvelope] = []
            for row in conn.execute(_PICK, {"stage": stage_id, "n": wanted}):
                if row.status == "PENDING":
                    picked.append(row)
                    continue
                abandoned = self._abandoned(row, policy, reclaimer=body.worker_id)
                events.append(abandoned)
                if row.attempts >= policy.max_attempts:
                    events.append(self._fail_exhausted(conn, row, policy, abandoned))
                else:
                    recovered.append((row, abandoned))
            dispatch = [(row, None) for row in picked] + recovered
            dispatched: dict[int, EventEnvelope] = {}
            for row, cause in dispatch:
                event = self._dispatched(row, row.attempts + 1, body, policy, lease, cause)
                dispatched[int(row.frame_id)] = event
                events.append(event)
            self._append(conn, events, outbox)
            leases: dict[int, datetime] = {}
            if dispatched:
                for fid, until in conn.execute(
                    _CLAIM_ROWS,
                    {
                        "worker": body.worker_id,
                        "lease": lease,
                        "command": int(body.command_id) if body.command_id else None,
                        "ids": list(dispatched),
                        "events": [int(e.event_id) for e in dispatched.values()],
                    },
                ):
                    leases[int(fid)] = until
            claimed = [
                self._claimed(row, row.attempts + 1, leases[int(row.frame_id)], stage, policy) for row, _ in dispatch
            ]
            if len(claimed) < wanted and not stage.exhausted:
                minted = self._mint(conn, stage, wanted - len(claimed))  # the last statement
        if minted is not None:
            claimed += self._claim_minted(conn, stage, minted, body, policy, lease, outbox)
        self._publish(outbox)
        return {"stage_id": str(stage_id), "frames": claimed, "exhausted": bool(stage.exhausted)}

    @staticmethod
    def _mint(conn: Connection, stage: Any, n: int) -> tuple[int, int, datetime] | None:
        """Reserve the next ``n`` frame boundaries (or fewer, at the frame limit), and the database's time.

        The last statement of the claim's first transaction: the stage row is locked from here to that
        transaction's commit only, so claimers mint concurrently. A claimer that dies before inserting
        its frames leaves a gap in ``frame_index``, which nothing depends on (rows are tied to frames by
        the cursor, not by the index).
        """
        row = conn.execute(_MINT, {"stage": int(stage.stage_id), "n": n}).first()
        return None if row is None or row.stop <= row.first else (int(row.first), int(row.stop), row.now)

    def _claim_minted(
        self,
        conn: Connection,
        stage: Any,
        span: tuple[int, int, datetime],
        body: ClaimRequest,
        policy: FramePolicy,
        lease: float,
        outbox: list[OutboxRow],
    ) -> list[dict[str, Any]]:
        """Insert the frames of reserved boundaries, already claimed, with their ``frame.dispatched``."""
        tenant, org = self.tenant
        first, stop, now = span
        frames: list[dict[str, Any]] = []
        claimed: list[dict[str, Any]] = []
        streams: list[tuple[str, list[EventEnvelope]]] = []
        with conn.begin():
            parent = None  # frames minted together form a chain (parent_frame_id)
            until = now + timedelta(seconds=lease)
            for index in range(first, stop):
                frame_id = self.ids.next_id()
                row = _NewFrame(frame_id, int(stage.stage_id), int(stage.execution_id), index, parent)
                event = self._dispatched(row, 1, body, policy, lease, None)
                streams.append((event.stream_id, [event]))
                frames.append(
                    {
                        "frame_id": frame_id,
                        "stage_id": row.stage_id,
                        "execution_id": row.execution_id,
                        "tenant_id": tenant,
                        "organization_id": org,
                        "parent_frame_id": parent,
                        "frame_index": index,
                        "command_id": int(body.command_id) if body.command_id else None,
                        "claimed_event_id": int(event.event_id),
                        "cursor": row.cursor,
                        "status": "CLAIMED",
                        "owner_worker": body.worker_id,
                        "lease_until": until,
                        "attempts": 1,
                    }
                )
                claimed.append(self._claimed(row, 1, until, stage, policy))
                parent = frame_id
            insert_rows(conn, frame_table, frames)
            self.store.append_new_streams_in(conn, streams, outbox=outbox)
        return claimed

    def _claimed(
        self, row: Any, attempt: int, lease_until: datetime, stage: Any, policy: FramePolicy
    ) -> dict[str, Any]:
        return {
            "frame_id": str(row.frame_id),
            "stage_id": str(row.stage_id),
            "execution_id": str(row.execution_id),
            "frame_index": row.frame_index,
            "attempt": attempt,
            "cursor": row.cursor if row.cursor is not None else {"frame_index": row.frame_index},
            "lease_until": lease_until.isoformat(),
            "dsl_ref": stage.dsl_ref,
            "frame_policy": policy.model_dump(mode="json"),
        }

    def _dispatched(
        self,
        row: Any,
        attempt: int,
        body: ClaimRequest,
        policy: FramePolicy,
        lease: float,
        cause: EventEnvelope | None,
    ) -> EventEnvelope:
        payload: dict[str, Any] = {
            "worker_id": body.worker_id,
            "attempt": attempt,
            "lease_seconds": lease,
            "retry_mode": policy.retry_mode,
            "row_split_retry": False,
            "max_attempts": policy.max_attempts,
            "cursor": body.cursor,
        }
        if body.command_id:
            payload["command_id"] = body.command_id
        if cause is not None:
            payload["reason"] = "lease_expired"
            payload["previous_worker_id"] = row.owner_worker
        meta = {"locality": body.locality} if body.locality else None
        return self._frame_event(
            row,
            "frame.dispatched",
            payload,
            ("dispatched", attempt),
            causation=int(cause.event_id) if cause is not None else None,
            meta=meta,
        )

    def _abandoned(self, row: Any, policy: FramePolicy, *, reclaimer: str) -> EventEnvelope:
        return self._frame_event(
            row,
            "frame.abandoned",
            {
                "attempt": row.attempts,
                "previous_worker_id": row.owner_worker,
                "reclaimer": reclaimer,
                "prior_lease_until": iso(row.lease_until),
                "previous_status": row.status,
                "retry_mode": policy.retry_mode,
                "row_split_retry": False,
                "max_attempts": policy.max_attempts,
            },
            ("abandoned", row.attempts),
            causation=row.claimed_event_id,
        )

    def _fail_exhausted(self, conn: Connection, row: Any, policy: FramePolicy, cause: EventEnvelope) -> EventEnvelope:
        """A frame whose lease expired on its last allowed attempt: ``frame.failed`` (``max_attempts``)."""
        error = {
            "kind": "max_attempts",
            "message": f"frame {row.frame_id} lost its lease on each of its {row.attempts} attempts",
            "attempts": row.attempts,
        }
        event = self._frame_event(
            row,
            "frame.failed",
            {
                "reason": "max_attempts",
                "attempt": row.attempts,
                "worker_id": row.owner_worker,
                "cursor": row.cursor,
                "row_count": 0,
                "events_emitted": 0,
                "error": error,
                "retry_mode": policy.retry_mode,
                "max_attempts": policy.max_attempts,
            },
            ("failed", row.attempts),
            causation=int(cause.event_id),
        )
        conn.execute(
            text(
                "UPDATE frame SET status = 'FAILED', error = CAST(:error AS jsonb), terminal_event_id = :event, "
                "owner_worker = NULL, lease_until = NULL, completed_at = now() WHERE frame_id = :id"
            ),
            {"error": as_json(error), "event": int(event.event_id), "id": int(row.frame_id)},
        )
        conn.execute(
            text("UPDATE stage SET frames_failed = frames_failed + 1 WHERE stage_id = :s"), {"s": int(row.stage_id)}
        )
        return event


class _NewFrame:
    """The columns of a frame being minted, shaped like a selected row."""

    __slots__ = (
        "attempts",
        "cursor",
        "execution_id",
        "frame_id",
        "frame_index",
        "owner_worker",
        "parent_frame_id",
        "stage_id",
    )

    def __init__(
        self,
        frame_id: int,
        stage_id: int,
        execution_id: int,
        frame_index: int,
        parent_frame_id: int | None,
        cursor: dict[str, Any] | None = None,
    ) -> None:
        self.frame_id = frame_id
        self.stage_id = stage_id
        self.execution_id = execution_id
        self.frame_index = frame_index
        self.parent_frame_id = parent_frame_id
        self.cursor = cursor if cursor is not None else {"frame_index": frame_index}
        self.owner_worker = None
        self.attempts = 0
