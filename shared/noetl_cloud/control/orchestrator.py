"""The orchestrator: the control plane's half of distributed execution (``docs/distributed.md``).

It owns the token state of every execution (``execution.workload/ctx/results``), admission and
routing; workers only run pipelines. Every state change happens in one transaction that holds the
execution's row lock, so the reports of one execution are folded one at a time, in commit order:

* :meth:`Orchestrator.claim` — the atomic ``issued → claimed`` transition and the command document
  (with ``get`` and ``heartbeat``: :mod:`noetl_cloud.control.commands`);
* :meth:`Orchestrator.report` — a worker's outcome: its events, the ``ctx`` patch, the terminal
  command event, then ``step.done`` / ``loop.done`` / ``step.failed``, the fired arcs, admission of
  the next tokens and their commands (with outbox rows), and ``playbook.completed|failed`` (here;
  the request bodies are in :mod:`noetl_cloud.control.reports`);
* :meth:`Orchestrator.reap` — commands whose claim lease ran out are issued again, or fail with
  ``lease_expired`` once their attempts are spent (:mod:`noetl_cloud.control.reaper`).

A :class:`Turn` is the pure part (:mod:`noetl_cloud.control.turn`, with :class:`ExecState` and the
opening of cursor loop stages): it folds one execution forward from an event and collects the rows
to write; the service methods here load state (the plans cache; the execution's row lock and the
writing of a turn's rows are in :mod:`noetl_cloud.control.execution_rows`), run a turn and write
what it collected.
"""

from __future__ import annotations

import copy
import threading
from datetime import timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.control.commands import CommandAccess
from noetl_cloud.control.execution_rows import ExecutionRows, _json
from noetl_cloud.control.loop_rows import load_loop
from noetl_cloud.control.reaper import Reaper
from noetl_cloud.control.reports import (
    MAX_REPORTED_EVENTS,
    WORKER_EVENTS,
    PatchOp,
    ReportedEvent,
    WorkerRef,
    WorkerReport,
)
from noetl_cloud.control.turn import ENDED, OPEN, ExecState, Turn, TurnHost, apply_patch
from noetl_cloud.control.workloads import WorkloadCache
from noetl_cloud.db.rows import RowsStatement
from noetl_cloud.engine.model import StepPlan, compile_playbook
from noetl_cloud.engine.templates import Renderer
from noetl_cloud.envelope import EventFactory, utc_now
from noetl_cloud.errors import Conflict, ValidationFailed
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRelay
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.spec import PlaybookDoc, parse_document

if TYPE_CHECKING:
    from noetl_cloud.spool.downstreams import DownstreamWatcher

__all__ = [
    "ENDED",
    "MAX_REPORTED_EVENTS",
    "OPEN",
    "WORKER_EVENTS",
    "ExecState",
    "Orchestrator",
    "PatchOp",
    "ReportedEvent",
    "Turn",
    "TurnHost",
    "WorkerRef",
    "WorkerReport",
    "apply_patch",
]


class Orchestrator(CommandAccess, Reaper, ExecutionRows):
    """Claims, reports, the reaper and the first turn of new executions, over PostgreSQL."""

    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        relay: OutboxRelay,
        ids: SnowflakeGenerator,
        events: EventFactory,
        *,
        command_topic_prefix: str,
        lease_s: float = 60.0,
        max_attempts: int = 3,
        max_tokens: int = 10_000,
        renotify_after_s: float = 300.0,
    ) -> None:
        self.engine = engine
        self.store = store
        self.relay = relay
        self.ids = ids
        self.events = events
        self.command_topic_prefix = command_topic_prefix
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self.renotify_after_s = renotify_after_s
        self.renderer = Renderer()
        self._plans: dict[int, tuple[PlaybookDoc, dict[str, StepPlan], dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.workloads = WorkloadCache()
        #: Reports ended executions of subscriptions to their downstream circuits (``None``: not watched).
        self.downstreams: DownstreamWatcher | None = None

    @property
    def tenant(self) -> tuple[str, str]:
        return self.events.tenant_id, self.events.organization_id

    def note(self, state: ExecState, command_id: str, event_id: str, step: str, attempt: int) -> dict[str, Any]:
        """The outbox row of a command notification on ``noetl-commands-<pool>``."""
        return self.notification(state.execution_id, state.pool, state.trace, command_id, event_id, step, attempt)

    def notification(
        self,
        execution_id: str,
        pool: str,
        trace: dict[str, Any] | None,
        command_id: str,
        event_id: str,
        step: str,
        attempt: int,
    ) -> dict[str, Any]:
        """A command notification (its outbox row's fields), from the command's and its execution's."""
        data = {
            "execution_id": execution_id,
            "command_id": command_id,
            "event_id": event_id,
            "step": step,
            "attempt": attempt,
        }
        attributes = {k: str(v) for k, v in data.items()}
        if trace:
            attributes.update({k: v for k, v in trace.items() if k in ("traceparent", "tracestate")})
        return {
            "event_id": int(event_id),
            "topic": self.command_topic_prefix + pool,
            "ordering_key": None,
            "attributes": attributes,
            "data": data,
        }

    # -- playbooks ------------------------------------------------------------------------------

    def plans_for(
        self, catalog_id: int, content: str | None = None, conn: Connection | None = None
    ) -> dict[str, StepPlan]:
        """The compiled steps of a catalog entry."""
        return self._compiled(catalog_id, content, conn)[1]

    def playbook_for(self, catalog_id: int, content: str | None = None) -> PlaybookDoc:
        """The parsed playbook of a catalog entry."""
        return self._compiled(catalog_id, content)[0]

    def _compiled(
        self, catalog_id: int, content: str | None = None, conn: Connection | None = None
    ) -> tuple[PlaybookDoc, dict[str, StepPlan], dict[str, Any]]:
        """The parsed, compiled and JSON forms of a catalog entry's playbook (immutable, so cached by id)."""
        with self._lock:
            cached = self._plans.get(catalog_id)
        if cached is not None:
            return cached
        if content is None:
            assert conn is not None
            content = conn.execute(
                text("SELECT content FROM catalog WHERE catalog_id = :id"), {"id": catalog_id}
            ).scalar_one()
        doc = parse_document(content)
        if not isinstance(doc, PlaybookDoc):
            raise ValidationFailed(f"catalog entry {catalog_id} is not a playbook", code="not_a_playbook")
        compiled = (doc, compile_playbook(doc), doc.model_dump(mode="json", by_alias=True, exclude_none=True))
        with self._lock:
            if len(self._plans) > 1024:
                self._plans.clear()
            self._plans[catalog_id] = compiled
        return compiled

    # -- reports --------------------------------------------------------------------------------

    def report(self, body: WorkerReport) -> dict[str, Any]:
        """Fold a worker's report of one command run; a duplicate changes nothing."""
        command_id = int(body.command_id)
        with self.engine.begin() as conn:
            state = self._lock_execution_of(conn, command_id)
            stream = f"execution/{state.execution_id}"
            cmd = self._lock_command(conn, command_id, state.pool, *self.tenant, stream=stream)
            if cmd.status in ENDED:
                return {"accepted": False, "duplicate": True, "execution_status": state.status}
            if (
                cmd.worker_id != body.worker_id
                or cmd.attempt != body.attempt
                or cmd.status not in ("claimed", "started")
            ):
                raise Conflict(
                    f"command {command_id} attempt {body.attempt} is not leased to {body.worker_id}",
                    code="lease_lost",
                    details={"status": cmd.status, "attempt": cmd.attempt},
                )
            for reported in body.events:
                if reported.event_type not in WORKER_EVENTS:
                    raise ValidationFailed(
                        f"a worker may not report {reported.event_type!r} events",
                        code="event_type_not_allowed",
                        details={"allowed": sorted(WORKER_EVENTS)},
                    )
            was_open = not state.ended
            turn = Turn(self, state, self.plans_for(state.catalog_id or 0, conn=conn))
            turn.head = cmd.head
            started = {"command_id": body.command_id, "worker_id": body.worker_id, "attempt": body.attempt}
            if body.started_at is not None:
                started["started_at"] = body.started_at.isoformat()
            base = ("command", body.command_id, body.attempt)
            turn.emit(
                "command.started",
                started,
                aggregate_type="command",
                aggregate_id=body.command_id,
                key=turn.key(*base, "started"),
            )
            meta = {"worker_id": body.worker_id, "command_id": body.command_id}
            for n, reported in enumerate(body.events, 1):
                turn.emit(
                    reported.event_type,
                    reported.payload,
                    key=turn.key(*base, n),
                    meta=meta,
                    event_time=reported.occurred_at,
                )
            patch = [op.model_dump() for op in body.ctx_patch]
            self._terminate(conn, turn, cmd, body.status, body.result, body.error, patch, body.worker_id)
            eager = self._hand_next(turn, body.worker_id) if body.accept_next else None
            rows = self.write(conn, turn)
            handed = [self._command_document(conn, eager, not body.has_workload)] if eager is not None else []
            # Commands waiting in the pool when the lock was taken, or notified by this turn. One issued
            # since by another transaction is missed here and reaches a worker by its notification.
            waiting = bool(cmd.queued or turn.notes)
        self.relay.hand_off(rows)
        if was_open and state.ended and state.subscription and self.downstreams is not None:
            # After the commit: the circuit counts an outcome that is recorded (best effort, never raises).
            self.downstreams.observe(state.subscription, state.execution_id, state.status, state.error, state.probe)
        if body.accept_next and waiting and len(handed) < body.next_slots:  # free slots: the oldest waiting
            handed += self.claim_queued(state.pool, body.worker_id, body.next_slots - len(handed))
        return {"accepted": True, "duplicate": False, "execution_status": state.status, "next": handed}

    def _hand_next(self, turn: Turn, worker_id: str) -> Any:
        """Eager dispatch: when this turn issues exactly one command, claim it for the reporting worker
        in this transaction (its ``command.claimed`` event, no notification) and return its fields for
        the command document; else ``None`` and every new command goes through its topic. A worker that
        dies holding it loses its lease, and the reaper issues the command again."""
        s = turn.state
        if s.ended or len(turn.commands) != 1 or turn.queue:
            return None
        row = turn.commands[0]
        lease = utc_now() + timedelta(seconds=self.lease_s)
        row.update(status="claimed", worker_id=worker_id, lease_expires_at=lease)
        turn.notes = [n for n in turn.notes if n["data"]["command_id"] != str(row["command_id"])]
        cid = str(row["command_id"])
        turn.emit(
            "command.claimed",
            {"command_id": cid, "worker_id": worker_id, "attempt": 1, "eager": True},
            aggregate_type="command",
            aggregate_id=cid,
            key=turn.key("command", cid, 1, "claimed"),
        )
        loop = turn.new_loops.get(str(row["step_run_id"])) or turn.changed_loops.get(str(row["step_run_id"]))
        return SimpleNamespace(
            **row,
            catalog_id=s.catalog_id,
            path=s.path,
            version=s.version,
            workload=s.workload,
            ctx=copy.deepcopy(s.ctx),
            parent_iter=s.parent_iter,
            mode=loop["mode"] if loop is not None else None,
        )

    @staticmethod
    def _lock_command(
        conn: Connection,
        command_id: int,
        pool: str | None = None,
        tenant: str | None = None,
        org: str | None = None,
        *,
        stream: str | None = None,
    ) -> Any:
        """Lock a command, with the number of its execution's open commands (``open_commands``),
        whether any command waits in ``pool`` (``queued``: the report's answer claims some for the
        worker's free slots only then, so a report with none waiting costs no claim transaction; false
        without a pool) and the version of ``stream`` (``head``, not locked: the turn's write checks it
        did not move; null without a stream).

        Called with the execution's row locked, and counted by this statement, not by the one that
        took that lock: a statement that waited for a row lock keeps the snapshot it started with, so a
        count taken there can miss what the lock's previous holder committed (a parallel branch's report
        ending its command), and an execution counted one command too many never ends. Every change of
        a command into or out of the open states happens under its execution's lock, so this count is
        exact until the commit."""
        return _LOCK_COMMAND(conn, {"id": command_id, "pool": pool, "t": tenant, "o": org, "stream": stream}).one()

    def _terminate(
        self,
        conn: Connection,
        turn: Turn,
        cmd: Any,
        status: str,
        result: Any,
        error: dict[str, Any] | None,
        patch: list[dict[str, Any]],
        worker_id: str | None,
    ) -> None:
        """Record a command's end and fold its outcome into the execution."""
        state = turn.state
        name = "command.completed" if status == "ok" else "command.failed"
        payload: dict[str, Any] = {
            "command_id": str(cmd.command_id),
            "step": cmd.step,
            "attempt": cmd.attempt,
            "worker_id": worker_id,
            "status": status,
        }
        if error is not None:
            payload["error"] = error
        turn.emit(
            name,
            payload,
            aggregate_type="command",
            aggregate_id=str(cmd.command_id),
            key=turn.key("command", cmd.command_id, "ended"),
        )
        ended = {
            "status": "completed" if status == "ok" else "failed",
            "result": _json(result),
            "error": _json(error) if error is not None else None,
            "id": cmd.command_id,
        }
        turn.ended_commands.append(ended)  # written with the turn, in its one statement
        if state.ended:
            return  # cancelled or failed meanwhile: the outcome is recorded, nothing more runs
        if cmd.kind == "iteration":
            loop = load_loop(conn, cmd.step_run_id)
            turn.changed_loops[str(cmd.step_run_id)] = loop
            conflict = turn.iteration_ended(loop, cmd.iteration, status, result, error, patch)
            if conflict is not None:  # the row holds what the loop keeps of it (loop_rows.LoopResults)
                ended.update(status="failed", result=_json(None), error=_json(conflict))
        else:
            apply_patch(state.ctx, patch)
            plan = turn.plans[cmd.step]
            turn.finish_step(
                plan, cmd.args, str(cmd.step_run_id), "step.done" if status == "ok" else "step.failed", result, error
            )
        turn.drain()
        turn.close(cmd.open_commands - 1)  # less the command that just ended (it was claimed or started)


_LOCK_COMMAND = RowsStatement(
    "SELECT command_id, execution_id, kind, step, status, attempt, max_attempts, worker_id, args, "
    "step_run_id, iteration, lease_expires_at < now() AS expired, "
    "(SELECT count(*) FROM command o WHERE o.execution_id = command.execution_id "
    " AND o.status IN ('issued', 'claimed', 'started')) AS open_commands, "
    "EXISTS (SELECT 1 FROM command q WHERE q.status = 'issued' AND q.tenant_id = :t "
    " AND q.organization_id = :o AND q.execution_pool = :pool) AS queued, "
    "(SELECT s.version FROM stream s WHERE s.stream_id = :stream) AS head "
    "FROM command WHERE command_id = :id FOR UPDATE"
)
