"""Ending and extending attempts: the heartbeat (``frame.started``, then ``frame.heartbeat``), and the
commit of one frame or of a batch of one stage's frames (``frame.committed`` or ``frame.failed``), which
closes the stages it drained and may hand the worker its next frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.envelope import EventEnvelope, PayloadRef
from noetl_cloud.errors import NoetlError
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.frames.claims import Claims
from noetl_cloud.frames.errors import FrameAlreadyTerminal, FrameNotFound, LeaseLost, StageNotOpen
from noetl_cloud.frames.models import BatchCommitRequest, CommitRequest, FrameOutcome, HeartbeatRequest
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.rows import FRAME_COLUMNS, TERMINAL, as_json

# The frames a commit or a heartbeat ends or extends, locked in id order (two batches over the same
# frames cannot deadlock); not their lease (pg8000 parses each timestamp with strptime).
_ENDING_COLUMNS = FRAME_COLUMNS.replace("f.lease_until, ", "")
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


class Commits(Claims):
    """Heartbeats and commits, single and batched."""

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
                conn.execute(_END_ROWS, {"rows": as_json(ended_rows)})
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
