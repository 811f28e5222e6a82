"""Stage and frame leases (distributed-runtime spec §5, docs/frames.md): claim, heartbeat, commit, reaper.

Every transition is one transaction: the frame row changes under its row lock and its event is appended,
with its outbox row, to the frame's own stream ``execution/{e}/stage/{s}/frame/{f}``; the outbox rows are
published after the commit. Idempotency keys are ``<tenant>/<org>/<execution>/frame/<f>/<kind>/<attempt>``
(heartbeats add their number), so a transition is recorded once per attempt.

* **claim** takes, under ``FOR UPDATE SKIP LOCKED`` (so claimers never wait on each other): pending frames
  first, then frames whose lease expired (``frame.abandoned``, then a new attempt; a frame that already
  had ``max_attempts`` attempts ends ``frame.failed`` with reason ``max_attempts`` instead), then newly
  minted frames at the stage's next boundary (``next_frame_index``) while the cursor is not exhausted
  and ``frame_limit`` is not reached. Each claimed frame gets ``frame.dispatched``.
* **heartbeat**: the first one of an attempt moves ``CLAIMED → RUNNING`` (``frame.started``), later ones
  extend the lease (``frame.heartbeat``).
* **commit** ends the attempt: ``frame.committed`` or ``frame.failed``. A frame already terminal answers
  409 ``frame_already_terminal`` with its ``terminal_event_id`` and writes nothing. A commit whose cursor
  says ``exhausted`` stops the minting; the stage closes (``stage.closed``) once it is exhausted (or at its
  frame limit) and no frame is open.
* **reap** (Cloud Scheduler) does to expired leases what a claim would, without waiting for one, and
  closes the stages of executions that ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.db.bulk import insert_rows
from noetl_cloud.db.schema import frame as frame_table
from noetl_cloud.db.schema import stage as stage_table
from noetl_cloud.envelope import EventEnvelope, EventFactory, PayloadRef, canonical_json
from noetl_cloud.errors import NoetlError
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow
from noetl_cloud.frames.errors import FrameAlreadyTerminal, FrameNotFound, LeaseLost, StageNotFound, StageNotOpen
from noetl_cloud.frames.models import (
    BatchCommitRequest,
    ClaimRequest,
    CommitRequest,
    FrameOutcome,
    HeartbeatRequest,
)
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.ids import SnowflakeGenerator

OPEN = ("PENDING", "CLAIMED", "RUNNING")
TERMINAL = ("COMMITTED", "FAILED")
EXECUTION_ENDED = ("completed", "failed", "cancelled")

_FRAME_COLUMNS = (
    "f.frame_id, f.stage_id, f.execution_id, f.frame_index, f.status, f.owner_worker, f.lease_until, "
    "f.attempts, f.heartbeats, f.cursor, f.claimed_event_id, f.terminal_event_id, f.parent_frame_id, f.command_id"
)
# Pending frames first, then expired leases (oldest first): one round trip, on the partial index of
# claimable rows (``ix_frame_claimable``: committed frames are not in it).
_PICK = text(
    f"SELECT {_FRAME_COLUMNS} FROM frame f WHERE f.stage_id = :stage AND (f.status = 'PENDING' "
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
# The frames a commit or a heartbeat ends or extends, locked in id order (two batches over the same
# frames cannot deadlock); not their lease (pg8000 parses each timestamp with strptime).
_ENDING_COLUMNS = _FRAME_COLUMNS.replace("f.lease_until, ", "")
_LOCK_FRAMES = text(
    f"SELECT {_ENDING_COLUMNS}, s.status AS stage_status, s.frame_policy, s.exhausted, s.frame_limit, "
    "s.next_frame_index FROM frame f JOIN stage s ON s.stage_id = f.stage_id "
    "WHERE f.frame_id = ANY(CAST(:ids AS bigint[])) AND f.tenant_id = :t AND f.organization_id = :o "
    "ORDER BY f.frame_id FOR UPDATE OF f"
)
# One JSON parameter for all the rows: pg8000 escapes text-array parameters character by character.
_END_ROWS = text(
    "UPDATE frame f SET status = v.status, cursor = v.cursor, row_count = v.row_count, output_ref = v.output_ref, "
    "events_emitted = v.emitted, error = v.error, terminal_event_id = v.event_id, lease_until = NULL, "
    "completed_at = now() "
    "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) "
    "AS v(frame_id bigint, status text, cursor jsonb, row_count bigint, output_ref jsonb, emitted bigint, "
    "error jsonb, event_id bigint) "
    "WHERE f.frame_id = v.frame_id"
)
_CLAIM_ROWS = text(
    "UPDATE frame f SET status = 'CLAIMED', owner_worker = :worker, attempts = f.attempts + 1, heartbeats = 0, "
    "lease_until = now() + make_interval(secs => :lease), claimed_event_id = v.event_id, "
    "command_id = COALESCE(:command, f.command_id) "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:events AS bigint[])) AS v(frame_id, event_id) "
    "WHERE f.frame_id = v.frame_id RETURNING f.frame_id, f.lease_until"
)


def _json(value: Any) -> str:
    return canonical_json(value)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class FrameService:
    """Leases of frames within stages, over PostgreSQL. Safe to share between threads."""

    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        relay: OutboxRelay | None,
        ids: SnowflakeGenerator,
        events: EventFactory,
        *,
        reaper_limit: int = 1000,
    ) -> None:
        self.engine = engine
        self.store = store
        self.relay = relay
        self.ids = ids
        self.events = events
        self.reaper_limit = reaper_limit

    @property
    def tenant(self) -> tuple[str, str]:
        return self.events.tenant_id, self.events.organization_id

    # -- events ---------------------------------------------------------------------------------

    def _key(self, execution_id: int, *parts: object) -> str:
        tenant, org = self.tenant
        return "/".join([tenant, org, str(execution_id), *map(str, parts)])

    def _frame_event(
        self,
        row: Any,
        event_type: str,
        payload: dict[str, Any],
        key_parts: Sequence[object],
        *,
        causation: int | None = None,
        payload_ref: PayloadRef | None = None,
        meta: dict[str, Any] | None = None,
    ) -> EventEnvelope:
        execution_id = int(row.execution_id)
        return self.events.new(
            event_type,
            stream_id=f"execution/{execution_id}/stage/{row.stage_id}/frame/{row.frame_id}",
            aggregate_type="frame",
            aggregate_id=str(row.frame_id),
            execution_id=str(execution_id),
            payload={
                "stage_id": str(row.stage_id),
                "frame_id": str(row.frame_id),
                "frame_index": row.frame_index,
                **({"parent_frame_id": str(row.parent_frame_id)} if row.parent_frame_id else {}),
                **payload,
            },
            payload_ref=payload_ref,
            meta=meta,
            causation_id=str(causation) if causation else None,
            idempotency_key=self._key(execution_id, "frame", row.frame_id, *key_parts),
        )

    def _append(self, conn: Connection, events: Sequence[EventEnvelope], outbox: list[OutboxRow]) -> None:
        """Append events of any frames' streams (each stream's in the order given), in a few statements."""
        if not events:
            return
        streams: dict[str, list[EventEnvelope]] = {}
        for event in events:
            streams.setdefault(event.stream_id, []).append(event)
        self.store.append_many_in(conn, list(streams.items()), outbox=outbox)

    def _publish(self, rows: list[OutboxRow]) -> None:
        """Hand committed outbox rows to the relay (a failed or lost publish leaves them pending for the
        outbox sweep)."""
        if self.relay is not None:
            self.relay.hand_off(rows)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the relay has published what it was handed; true when it has."""
        return self.relay is None or self.relay.flush(timeout)

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
            "started_at": _iso(row.started_at),
            "ended_at": _iso(row.ended_at),
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
                "prior_lease_until": _iso(row.lease_until),
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
            {"error": _json(error), "event": int(event.event_id), "id": int(row.frame_id)},
        )
        conn.execute(
            text("UPDATE stage SET frames_failed = frames_failed + 1 WHERE stage_id = :s"), {"s": int(row.stage_id)}
        )
        return event

    # -- heartbeat ------------------------------------------------------------------------------

    def _lock_frame(self, conn: Connection, frame_id: int) -> Any:
        """One frame, locked, with its stage's columns: the batch commit's lock of a single frame."""
        tenant, org = self.tenant
        row = conn.execute(_LOCK_FRAMES, {"ids": [frame_id], "t": tenant, "o": org}).first()
        if row is None:
            raise FrameNotFound(f"no frame {frame_id}")
        return row

    @staticmethod
    def _refuse_terminal(row: Any) -> None:
        if row.status in TERMINAL:
            raise FrameAlreadyTerminal(
                f"frame {row.frame_id} is already {row.status}",
                details={"status": row.status, "terminal_event_id": str(row.terminal_event_id)},
            )

    @staticmethod
    def _refuse_stranger(row: Any, worker_id: str) -> None:
        if row.status not in ("CLAIMED", "RUNNING") or row.owner_worker != worker_id:
            raise LeaseLost(
                f"frame {row.frame_id} is not leased to {worker_id}",
                details={"status": row.status, "attempt": row.attempts},
            )

    def heartbeat(self, frame_id: int, body: HeartbeatRequest) -> dict[str, Any]:
        """Extend this worker's lease; the first heartbeat of an attempt records ``frame.started``."""
        outbox: list[OutboxRow] = []
        with self.engine.begin() as conn:
            row = self._lock_frame(conn, frame_id)
            self._refuse_terminal(row)
            self._refuse_stranger(row, body.worker_id)
            if row.stage_status != "OPEN":
                raise StageNotOpen(f"stage {row.stage_id} is {row.stage_status}", details={"status": row.stage_status})
            policy = FramePolicy.model_validate(row.frame_policy)
            lease = body.lease_seconds or policy.lease_seconds
            started = row.status == "CLAIMED"
            beat = row.heartbeats + 1
            kind = "frame.started" if started else "frame.heartbeat"
            parts: tuple[object, ...] = ("started", row.attempts) if started else ("heartbeat", row.attempts, beat)
            event = self._frame_event(
                row,
                kind,
                {"worker_id": body.worker_id, "attempt": row.attempts, "lease_seconds": lease, "heartbeat": beat},
                parts,
                causation=row.claimed_event_id,
            )
            self._append(conn, [event], outbox)
            until = conn.execute(
                text(
                    "UPDATE frame SET status = 'RUNNING', heartbeats = :beat, "
                    "lease_until = now() + make_interval(secs => :lease) WHERE frame_id = :id RETURNING lease_until"
                ),
                {"beat": beat, "lease": lease, "id": frame_id},
            ).scalar_one()
        self._publish(outbox)
        return {"frame_id": str(frame_id), "status": "RUNNING", "lease_until": until.isoformat(), "event": kind}

    # -- commit ---------------------------------------------------------------------------------

    def commit(self, frame_id: int, body: CommitRequest) -> dict[str, Any]:
        """End this worker's attempt: ``frame.committed`` or ``frame.failed``; closes a finished stage.
        With ``body.claim``, the answer also carries the next frames leased to the worker (``frames``)."""
        body.check_durable()
        with self.engine.connect() as conn:
            ended, _stages, closed = self._end_attempts(conn, body.worker_id, [(frame_id, body)], stage_id=None)
            outcome = ended[0]
            if isinstance(outcome, NoetlError):
                raise outcome
            row, event, status = outcome
            done = _finishes(row, body)
            stage_status = closed.get(int(row.stage_id)) or row.stage_status
            out: dict[str, Any] = {
                "ok": True,
                "frame_id": str(frame_id),
                "status": status,
                "terminal_event_id": event.event_id,
                "stage_status": stage_status,
                "next_action": "stop" if done or int(row.stage_id) in closed else "claim",
            }
            if body.claim is not None:
                out["frames"] = self._next_frames(conn, int(row.stage_id), out["next_action"], body)
        return out

    def commit_many(self, stage_id: int, body: BatchCommitRequest) -> dict[str, Any]:
        """End the attempts of many frames of one stage in one transaction, each answered on its own:
        ``{frame_id, ok: true, status, terminal_event_id}`` or ``{frame_id, ok: false, error}`` (the
        error a single commit would raise: ``frame_not_found``, ``frame_already_terminal``,
        ``lease_lost``); a refused frame writes nothing and does not undo the others. With
        ``body.claim``, the answer also carries the next frames leased to the worker."""
        for item in body.commits:
            item.check_durable()
        items = [(int(item.frame_id), item) for item in body.commits]
        with self.engine.connect() as conn:
            ended, stages, closed = self._end_attempts(conn, body.worker_id, items, stage_id=stage_id)
            return self._batch_answer(conn, stage_id, body, items, ended, stages, closed)

    def _batch_answer(
        self,
        conn: Connection,
        stage_id: int,
        body: BatchCommitRequest,
        items: Sequence[tuple[int, FrameOutcome]],
        ended: Sequence[tuple[Any, EventEnvelope, str] | NoetlError],
        stages: dict[int, str],
        closed: dict[int, str],
    ) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        stop = bool(closed)
        for (frame_id, item), outcome in zip(items, ended, strict=True):
            if isinstance(outcome, NoetlError):
                results.append({"frame_id": str(frame_id), "ok": False, "error": outcome.to_dict()})
                continue
            row, event, status = outcome
            stop = stop or _finishes(row, item)
            results.append(
                {"frame_id": str(frame_id), "ok": True, "status": status, "terminal_event_id": event.event_id}
            )
        stage = closed.get(stage_id) or stages.get(stage_id) or str(self._stage_row(conn, stage_id).status)
        out: dict[str, Any] = {
            "stage_id": str(stage_id),
            "results": results,
            "committed": sum(1 for r in results if r["ok"]),
            "stage_status": stage,
            "next_action": "stop" if stop or stage != "OPEN" else "claim",
        }
        if body.claim is not None:
            out["frames"] = self._next_frames(conn, stage_id, out["next_action"], body)
        return out

    def _next_frames(
        self, conn: Connection, stage_id: int, next_action: str, body: CommitRequest | BatchCommitRequest
    ) -> list[dict[str, Any]]:
        """The frames a commit hands on: none once the stage is done or closed, else a claim's."""
        if next_action != "claim" or body.claim is None:
            return []
        try:
            return list(self._claim_on(conn, stage_id, body.claim.request(body.worker_id))["frames"])
        except StageNotOpen:  # closed by another worker's commit meanwhile
            return []

    def _end_attempts(
        self, conn: Connection, worker_id: str, items: Sequence[tuple[int, FrameOutcome]], *, stage_id: int | None
    ) -> tuple[list[tuple[Any, EventEnvelope, str] | NoetlError], dict[int, str], dict[int, str]]:
        """One transaction ending the attempts of ``items`` (frames of ``stage_id`` when given): per
        item, ``(row, terminal event, status)`` or the error refusing it; then the stages this drained
        are closed. Returns the outcomes, the status of each stage seen (as the transaction found
        it), and ``{stage_id: status}`` of the stages closed."""
        tenant, org = self.tenant
        outbox: list[OutboxRow] = []
        ended: list[tuple[Any, EventEnvelope, str] | NoetlError] = []
        finishing: set[int] = set()
        with conn.begin():
            rows = {
                int(r.frame_id): r
                for r in conn.execute(_LOCK_FRAMES, {"ids": [fid for fid, _ in items], "t": tenant, "o": org})
            }
            seen = {int(r.stage_id): str(r.stage_status) for r in rows.values()}
            streams: list[tuple[str, list[EventEnvelope]]] = []
            updates: list[tuple[int, str, FrameOutcome, EventEnvelope]] = []
            stages: dict[int, list[int]] = {}  # stage id -> [frames failed, cursor exhausted]
            for frame_id, item in items:
                row = rows.get(frame_id)
                if row is None or (stage_id is not None and int(row.stage_id) != stage_id):
                    where = "" if stage_id is None else f" in stage {stage_id}"
                    ended.append(FrameNotFound(f"no frame {frame_id}{where}"))
                    continue
                try:
                    self._refuse_terminal(row)
                    self._refuse_stranger(row, worker_id)
                except NoetlError as exc:
                    ended.append(exc)
                    continue
                status, event = self._terminal_event(row, worker_id, item)
                streams.append((event.stream_id, [event]))
                updates.append((frame_id, status, item, event))
                ended.append((row, event, status))
                counts = stages.setdefault(int(row.stage_id), [0, 0])
                counts[0] += status == "FAILED"
                if item.cursor.get("exhausted") is True and not row.exhausted:
                    counts[1] = 1
                if row.exhausted or counts[1] or _at_limit(row):
                    finishing.add(int(row.stage_id))
            if streams:
                self.store.append_many_in(conn, streams, outbox=outbox)
                ended_rows = [
                    {
                        "frame_id": frame_id,
                        "status": status,
                        "cursor": item.cursor,
                        "row_count": item.row_count,
                        "output_ref": item.output_ref,
                        "emitted": item.events_emitted,
                        "error": event.payload["error"] if status == "FAILED" else None,
                        "event_id": int(event.event_id),
                    }
                    for frame_id, status, item, event in updates
                ]
                conn.execute(_END_ROWS, {"rows": _json(ended_rows)})
            for sid, (failed, exhausted) in sorted(stages.items()):
                if failed or exhausted:
                    conn.execute(
                        text(
                            "UPDATE stage SET frames_failed = frames_failed + :failed, "
                            "exhausted = exhausted OR :exhausted WHERE stage_id = :s"
                        ),
                        {"failed": failed, "exhausted": bool(exhausted), "s": sid},
                    )
        self._publish(outbox)
        closed: dict[int, str] = {}
        for sid in sorted(finishing):
            closed_as = self.close_if_done(sid)
            if closed_as is not None:
                closed[sid] = closed_as
        return ended, seen, closed

    def _terminal_event(self, row: Any, worker_id: str, item: FrameOutcome) -> tuple[str, EventEnvelope]:
        """The frame's ``frame.committed`` (status ``COMMITTED``) or ``frame.failed`` (``FAILED``)."""
        policy = FramePolicy.model_validate(row.frame_policy)
        ok = item.status == "COMPLETED"
        status = "COMMITTED" if ok else "FAILED"
        payload: dict[str, Any] = {
            "worker_id": worker_id,
            "attempt": row.attempts,
            "status": status,
            "cursor": item.cursor,
            "row_count": item.row_count,
            "events_emitted": item.events_emitted,
            "output_ref": item.output_ref,
            "retry_mode": policy.retry_mode,
            "max_attempts": policy.max_attempts,
        }
        if not ok:
            payload["reason"] = "task_failed"
            payload["error"] = item.error or {"kind": "frame_failed", "message": "the frame's task failed"}
        event = self._frame_event(
            row,
            "frame.committed" if ok else "frame.failed",
            payload,
            ("committed" if ok else "failed", row.attempts),
            causation=row.claimed_event_id,
            payload_ref=_rows_payload_ref(item.output_ref),
        )
        return status, event

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
                            f"SELECT {_FRAME_COLUMNS}, s.frame_policy FROM frame f "
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


def _finishes(row: Any, item: FrameOutcome) -> bool:
    """After this commit the stage mints no more frames: its cursor is exhausted (now or before), or
    its frame limit is reached."""
    return bool(row.exhausted) or item.cursor.get("exhausted") is True or _at_limit(row)


def _at_limit(row: Any) -> bool:
    """Every frame the stage may have is minted (its ``frame_limit`` is reached)."""
    return row.frame_limit is not None and row.next_frame_index >= row.frame_limit


def _rows_payload_ref(output_ref: dict[str, Any] | None) -> PayloadRef | None:
    """The envelope's ``payload_ref``: the durable Arrow IPC rows of the frame, when committed with them."""
    rows_ref = output_ref.get("rows_ref") if isinstance(output_ref, dict) else None
    if not isinstance(rows_ref, dict):
        return None
    try:
        return PayloadRef(
            uri=str(rows_ref["uri"]),
            sha256=str(rows_ref["sha256"]),
            media_type=str(rows_ref["media_type"]),
            size_bytes=rows_ref.get("size_bytes"),
        )
    except (KeyError, ValueError):
        return None


def stage_opened_payload(
    stage_id: int, kind: str, step_name: str, policy: FramePolicy, frame_limit: int | None
) -> dict[str, Any]:
    """The payload of ``stage.opened``."""
    return {
        "stage_id": str(stage_id),
        "kind": kind,
        "step_name": step_name,
        "frame_policy": policy.model_dump(mode="json"),
        "frame_limit": frame_limit,
    }


def stage_row(
    stage_id: int,
    execution_id: int,
    tenant_id: str,
    organization_id: str,
    step_name: str,
    policy: FramePolicy,
    *,
    opened_event_id: int,
    kind: str = "loop",
    dsl_ref: str | None = None,
    step_run_id: int | None = None,
    frame_limit: int | None = None,
    loop_event_id: str | None = None,
) -> dict[str, Any]:
    """A new stage row (inserted in the transaction that writes its ``stage.opened``)."""
    return {
        "stage_id": stage_id,
        "execution_id": execution_id,
        "tenant_id": tenant_id,
        "organization_id": organization_id,
        "parent_event_id": int(loop_event_id) if loop_event_id else None,
        "loop_event_id": loop_event_id,
        "opened_event_id": opened_event_id,
        "kind": kind,
        "step_name": step_name,
        "dsl_ref": dsl_ref or f"workflow/{step_name}",
        "step_run_id": step_run_id,
        "frame_policy": policy.model_dump(mode="json"),
        "frame_limit": frame_limit,
    }
