"""The orchestrator: the control plane's half of distributed execution (``docs/distributed.md``).

It owns the token state of every execution (``execution.workload/ctx/results``), admission and
routing; workers only run pipelines. Every state change happens in one transaction that holds the
execution's row lock, so the reports of one execution are folded one at a time, in commit order:

* :meth:`Orchestrator.claim` — the atomic ``issued → claimed`` transition and the command document;
* :meth:`Orchestrator.report` — a worker's outcome: its events, the ``ctx`` patch, the terminal
  command event, then ``step.done`` / ``loop.done`` / ``step.failed``, the fired arcs, admission of
  the next tokens and their commands (with outbox rows), and ``playbook.completed|failed``;
* :meth:`Orchestrator.reap` — commands whose claim lease ran out are issued again, or fail with
  ``lease_expired`` once their attempts are spent.

A :class:`Turn` is the pure part: it folds one execution forward from an event and collects the
rows to write; the service methods load state, run a turn and write what it collected.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine, text

from noetl_cloud.db.bulk import InsertBatch
from noetl_cloud.db.schema import command, loop_run, stage
from noetl_cloud.db.schema import outbox as outbox_table
from noetl_cloud.engine.model import StepPlan, compile_playbook
from noetl_cloud.engine.routing import SUCCESS_EVENTS, admit, collection, route, template_error
from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope
from noetl_cloud.envelope import EventEnvelope, EventFactory, utc_now
from noetl_cloud.errors import Conflict, NoetlError, NotFound, ValidationFailed
from noetl_cloud.eventlog.postgres import PostgresEventStore, run_batch
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow, like_prefix
from noetl_cloud.frames.stages import open_cursor_stage
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.spec import PlaybookDoc, parse_document

OPEN = ("issued", "claimed", "started")
ENDED = ("completed", "failed", "cancelled")
#: The events a worker may report for a command run; everything else is the control plane's to emit.
WORKER_EVENTS = frozenset({"task.started", "task.done", "ctx.patched"})
MAX_REPORTED_EVENTS = 10_000


class ReportedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_type: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime | None = None


class PatchOp(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: Literal["add", "replace", "remove"]
    path: str = Field(pattern=r"^/[^/]*$", max_length=1024)
    value: Any = None


class WorkerReport(BaseModel):
    """The body of ``POST /api/events``: one command run's outcome."""

    model_config = ConfigDict(extra="forbid")
    command_id: str = Field(pattern=r"^[0-9]{1,19}$")
    worker_id: str = Field(min_length=1, max_length=256)
    attempt: int = Field(ge=1)
    started_at: datetime | None = None
    status: Literal["ok", "error"]
    result: Any = None
    error: dict[str, Any] | None = None
    ctx_patch: list[PatchOp] = Field(default_factory=list, max_length=MAX_REPORTED_EVENTS)
    events: list[ReportedEvent] = Field(default_factory=list, max_length=MAX_REPORTED_EVENTS)
    # Eager dispatch: the worker will run the next command itself when this report issues exactly
    # one; the answer's ``next`` then holds it, already claimed for this worker (no Pub/Sub hop).
    accept_next: bool = False


class WorkerRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker_id: str = Field(min_length=1, max_length=256)


@dataclass
class ExecState:
    """The token state of one execution, as stored on its row."""

    execution_id: str
    tenant_id: str
    organization_id: str
    pool: str
    path: str
    catalog_id: int | None
    trace: dict[str, Any] | None
    workload: dict[str, Any]
    ctx: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    tokens_fired: int = 0
    status: str = "started"
    error: dict[str, Any] | None = None
    version: int | None = None  # the playbook's catalog version
    parent_iter: Any = None  # meta.parent_iter of a child started inside a loop iteration
    open_commands: int = 0  # commands issued, claimed or started when the row was locked

    @property
    def ended(self) -> bool:
        return self.status in ENDED


def apply_patch(ctx: dict[str, Any], ops: Sequence[dict[str, Any]]) -> None:
    """Apply top-level JSON-Patch ops (what ``set_ctx`` produces) to ``ctx`` in place."""
    for op in ops:
        key = _unescape(op["path"][1:])
        if op["op"] == "remove":
            ctx.pop(key, None)
        else:
            ctx[key] = copy.deepcopy(op.get("value"))


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class Turn:
    """Folds one execution forward and collects what to write: events, commands, loop runs, notifications.

    Tokens fire in FIFO order, as in the in-process runner: admission, ``step.started``, then either an
    immediate end (a denied token, an empty loop, a template failure) or the commands a worker runs.
    """

    def __init__(self, orch: Orchestrator, state: ExecState, plans: dict[str, StepPlan]) -> None:
        self.orch = orch
        self.state = state
        self.plans = plans
        self.stream = f"execution/{state.execution_id}"
        self.events: list[EventEnvelope] = []
        self.commands: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.new_loops: dict[str, dict[str, Any]] = {}
        self.new_stages: list[dict[str, Any]] = []  # stages of cursor loops (docs/frames.md)
        self.changed_loops: dict[str, dict[str, Any]] = {}
        self.queue: deque[tuple[str, dict[str, Any]]] = deque()
        self.failure: dict[str, Any] | None = None
        self.last: str | None = None

    # -- events ---------------------------------------------------------------------------------

    def key(self, *parts: object) -> str:
        s = self.state
        return "/".join([s.tenant_id, s.organization_id, s.execution_id, *map(str, parts)])

    def emit(
        self,
        event_type: str,
        payload: dict[str, Any],
        *,
        aggregate_type: str = "execution",
        aggregate_id: str | None = None,
        key: str | None = None,
        meta: dict[str, Any] | None = None,
        event_time: datetime | None = None,
    ) -> EventEnvelope:
        s = self.state
        trace_meta = {"trace": s.trace} if s.trace else {}
        event = self.orch.events.new(
            event_type,
            stream_id=self.stream,
            aggregate_type=aggregate_type,
            aggregate_id=aggregate_id or s.execution_id,
            execution_id=s.execution_id,
            payload=payload,
            meta={**trace_meta, **(meta or {})},
            causation_id=self.last,
            idempotency_key=key,
            event_time=event_time,
        )
        self.events.append(event)
        self.last = event.event_id
        return event

    # -- tokens ---------------------------------------------------------------------------------

    def fire(self, step: str, args: dict[str, Any]) -> None:
        """Admit one token and start its step run."""
        s = self.state
        s.tokens_fired += 1
        if s.tokens_fired > self.orch.max_tokens:
            self.fail({"kind": "token_limit", "message": f"more than {self.orch.max_tokens} tokens"})
            return
        plan = self.plans[step]
        renderer = self.orch.renderer
        scope = build_scope(workload=s.workload, ctx=s.ctx, args=args, token=args)
        step_run_id = self.orch.ids.next_str()
        try:
            allowed, rule = admit(renderer, plan, scope)
        except TemplateFailure as exc:
            self.emit("step.started", {"step": step, "step_run_id": step_run_id, "args": args})
            self.finish_step(plan, args, step_run_id, "step.failed", None, template_error(exc))
            return
        if not allowed:
            self.emit("step.denied", {"step": step, "args": args, "rule": rule})
            return
        self.emit("step.started", {"step": step, "step_run_id": step_run_id, "args": args})
        if plan.loop is None:
            self.issue(step, args, step_run_id, "step")
            return
        try:
            if plan.loop.mode == "cursor":  # its slots claim frames of a stage (docs/frames.md)
                items = open_cursor_stage(self, plan, step_run_id)
            else:
                items = collection(renderer, plan, scope)
        except TemplateFailure as exc:
            self.finish_step(plan, args, step_run_id, "step.failed", None, template_error(exc))
            return
        if not items:
            self.finish_step(plan, args, step_run_id, "loop.done", [], None)
            return
        parallel = plan.loop.mode in ("parallel", "cursor")
        loop = {
            "step_run_id": int(step_run_id),
            "execution_id": int(s.execution_id),
            "step": step,
            "args": args,
            "mode": "parallel" if parallel else "sequential",
            "max_in_flight": (plan.loop.max_in_flight or len(items)) if parallel else 1,
            "items": items,
            "next_index": 0,
            "in_flight": 0,
            "results": {},
            "ctx_owners": {},
            "failed_index": None,
            "error": None,
        }
        self.new_loops[step_run_id] = loop
        self.top_up(loop)

    def top_up(self, loop: dict[str, Any]) -> None:
        """Issue iteration commands while the loop has free slots and no failure."""
        items = loop["items"]
        while loop["failed_index"] is None and loop["in_flight"] < loop["max_in_flight"]:
            index = loop["next_index"]
            if index >= len(items):
                return
            self.issue(loop["step"], loop["args"], str(loop["step_run_id"]), "iteration", index, items[index])
            loop["next_index"] = index + 1
            loop["in_flight"] += 1

    def issue(
        self,
        step: str,
        args: dict[str, Any],
        step_run_id: str,
        kind: str,
        iteration: int | None = None,
        item: Any = None,
    ) -> None:
        s = self.state
        command_id = self.orch.ids.next_str()
        payload: dict[str, Any] = {
            "command_id": command_id,
            "step": step,
            "kind": kind,
            "step_run_id": step_run_id,
            "execution_pool": s.pool,
            "attempt": 1,
        }
        if iteration is not None:
            payload["iteration"] = iteration
        issued = self.emit(
            "command.issued",
            payload,
            aggregate_type="command",
            aggregate_id=command_id,
            key=self.key("command", command_id, 1, "issued"),
        )
        self.commands.append(
            {
                "command_id": int(command_id),
                "execution_id": int(s.execution_id),
                "tenant_id": s.tenant_id,
                "organization_id": s.organization_id,
                "step": step,
                "execution_pool": s.pool,
                "status": "issued",
                "attempt": 1,
                "args": args,
                "trace": s.trace,
                "issued_event_id": int(issued.event_id),
                "kind": kind,
                "step_run_id": int(step_run_id),
                "iteration": iteration,
                "item": item,
                "max_attempts": self.orch.max_attempts,
            }
        )
        self.notes.append(self.orch.note(s, command_id, issued.event_id, step, 1))

    def finish_step(
        self, plan: StepPlan, args: dict[str, Any], step_run_id: str, name: str, result: Any, error: Any
    ) -> None:
        """The terminal event of a step run, then routing (§8) on it."""
        s = self.state
        status = "ok" if name in SUCCESS_EVENTS else "error"
        s.results[plan.name] = result
        self.emit(
            name, {"step": plan.name, "step_run_id": step_run_id, "status": status, "result": result, "error": error}
        )
        event = {"name": name, "step": plan.name, "status": status, "result": result, "error": error}
        scope = build_scope(workload=s.workload, ctx=s.ctx, args=args, event=event)
        try:
            selected = route(self.orch.renderer, plan, event, scope)
        except TemplateFailure as exc:
            self.fail({"kind": exc.code, "message": exc.message, **(exc.details or {})})
            return
        for arc in selected:
            self.emit("next.selected", arc.event_payload(plan.name, name))
            self.queue.append((arc.step, arc.args))
        if name == "step.failed" and not selected:
            self.fail({"kind": "step_failed", "step": plan.name, "error": error})

    def fail(self, error: dict[str, Any]) -> None:
        if self.failure is None:
            self.failure = error

    def drain(self) -> None:
        while self.queue and self.failure is None:
            self.fire(*self.queue.popleft())

    def close(self, still_open: int) -> None:
        """End the execution when it failed, or when no command or token is left."""
        s = self.state
        if self.failure is not None:
            self.queue.clear()
            for row in self.commands:
                row["status"] = "cancelled"
            self.notes.clear()
            s.status, s.error = "failed", self.failure
            self.emit("playbook.failed", {"path": s.path, "error": self.failure}, key=self.key("playbook.ended"))
        elif still_open == 0 and not self.commands and not self.queue:
            s.status = "completed"
            self.emit(
                "playbook.completed", {"path": s.path, "steps": sorted(s.results)}, key=self.key("playbook.ended")
            )

    # -- reports --------------------------------------------------------------------------------

    def iteration_ended(
        self, loop: dict[str, Any], index: int, status: str, result: Any, error: Any, patch: list[dict[str, Any]]
    ) -> None:
        """Fold one iteration's outcome into its loop; end the loop when nothing is left in flight."""
        loop["in_flight"] -= 1
        writer = f"iteration {index}"
        if loop["mode"] == "parallel":
            conflict = self._conflict(loop, patch, writer)
            if conflict is not None:  # the iteration fails and writes nothing, as in-process
                status, result, error, patch = "error", None, conflict, []
        apply_patch(self.state.ctx, patch)
        if loop["mode"] == "parallel":
            for op in patch:
                loop["ctx_owners"].setdefault(_unescape(op["path"][1:]), writer)
        if status == "ok" or loop["mode"] == "parallel":  # as in-process: a parallel loop keeps every finished run
            loop["results"][str(index)] = result
        if status != "ok" and (loop["failed_index"] is None or index < loop["failed_index"]):
            loop["failed_index"] = index
            loop["error"] = {**(error or {}), "iteration": index}
        self.top_up(loop)
        if loop["in_flight"] or (loop["failed_index"] is None and loop["next_index"] < len(loop["items"])):
            return
        ordered = [loop["results"][k] for k in sorted(loop["results"], key=int)]
        name = "loop.done" if loop["failed_index"] is None else "step.failed"
        self.finish_step(self.plans[loop["step"]], loop["args"], str(loop["step_run_id"]), name, ordered, loop["error"])

    def _conflict(self, loop: dict[str, Any], patch: list[dict[str, Any]], writer: str) -> dict[str, Any] | None:
        """§6.6: a ``ctx`` key another iteration of this parallel loop wrote with a different value."""
        for op in patch:
            key = _unescape(op["path"][1:])
            owner = loop["ctx_owners"].get(key)
            if owner is not None and owner != writer and self.state.ctx.get(key) != op.get("value"):
                return {
                    "kind": "ctx_conflict",
                    "message": f"set_ctx conflict on key '{key}': already written by {owner} in this parallel loop",
                    "key": key,
                    "owner": owner,
                    "writer": writer,
                }
        return None


class Orchestrator:
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

    @property
    def tenant(self) -> tuple[str, str]:
        return self.events.tenant_id, self.events.organization_id

    def note(self, state: ExecState, command_id: str, event_id: str, step: str, attempt: int) -> dict[str, Any]:
        """The outbox row of a command notification on ``noetl-commands-<pool>``."""
        data = {
            "execution_id": state.execution_id,
            "command_id": command_id,
            "event_id": event_id,
            "step": step,
            "attempt": attempt,
        }
        attributes = {k: str(v) for k, v in data.items()}
        if state.trace:
            attributes.update({k: v for k, v in state.trace.items() if k in ("traceparent", "tracestate")})
        return {
            "event_id": int(event_id),
            "topic": self.command_topic_prefix + state.pool,
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

    # -- execution state ------------------------------------------------------------------------

    def _lock_execution(self, conn: Connection, execution_id: int) -> ExecState:
        return self._locked(
            conn,
            _LOCK_EXECUTION,
            {"id": execution_id},
            NotFound(f"no execution {execution_id}", code="execution_not_found"),
        )

    def _lock_execution_of(self, conn: Connection, command_id: int) -> ExecState:
        """Lock the execution of a command (one round trip: the command's row names it)."""
        return self._locked(
            conn,
            _LOCK_EXECUTION_OF,
            {"command": command_id},
            NotFound(f"no command {command_id}", code="command_not_found"),
        )

    def _locked(self, conn: Connection, statement: Any, params: dict[str, Any], missing: NoetlError) -> ExecState:
        tenant, org = self.tenant
        row = conn.execute(statement, {**params, "t": tenant, "o": org}).first()
        if row is None:
            raise missing
        return ExecState(
            execution_id=str(row.execution_id),
            tenant_id=tenant,
            organization_id=org,
            pool=row.execution_pool,
            path=row.path,
            catalog_id=row.catalog_id,
            trace=row.trace,
            workload=row.workload,
            ctx=row.ctx,
            results=row.results,
            tokens_fired=row.tokens_fired,
            status=row.status,
            error=row.error,
            version=row.version,
            parent_iter=row.parent_iter,
            open_commands=row.open_commands,
        )

    def write(self, conn: Connection, turn: Turn, *, new_stream: bool = False) -> list[OutboxRow]:
        """Write one turn of an existing execution: state, events, commands, loops, notifications, in one
        statement after the stream head's bump (two round trips)."""
        s = turn.state
        ended = s.status in ENDED
        if s.status == "failed":  # not in the batch: one statement may not update a row twice
            conn.execute(
                text(
                    "UPDATE command SET status = 'cancelled', updated_at = now() "
                    "WHERE execution_id = :id AND status IN ('issued', 'claimed', 'started')"
                ),
                {"id": int(s.execution_id)},
            )
        batch, rows = InsertBatch(), list[OutboxRow]()
        batch.statement(
            "UPDATE execution SET ctx = CAST(:ctx AS jsonb), results = CAST(:results AS jsonb), "
            "tokens_fired = :tokens, status = :status, error = CAST(:error AS jsonb), updated_at = now(), "
            "ended_at = CASE WHEN :ended THEN now() ELSE ended_at END WHERE execution_id = :id",
            {
                "ctx": _json(s.ctx),
                "results": _json(s.results),
                "tokens": s.tokens_fired,
                "status": s.status,
                "error": _json(s.error) if s.error is not None else None,
                "ended": ended,
                "id": int(s.execution_id),
            },
        )
        for loop in turn.changed_loops.values():
            batch.statement(
                "UPDATE loop_run SET next_index = :next_index, in_flight = :in_flight, "
                "results = CAST(:results AS jsonb), ctx_owners = CAST(:owners AS jsonb), "
                "failed_index = :failed_index, error = CAST(:error AS jsonb) WHERE step_run_id = :id",
                {
                    "next_index": loop["next_index"],
                    "in_flight": loop["in_flight"],
                    "results": _json(loop["results"]),
                    "owners": _json(loop["ctx_owners"]),
                    "failed_index": loop["failed_index"],
                    "error": _json(loop["error"]) if loop["error"] is not None else None,
                    "id": loop["step_run_id"],
                },
            )
        if turn.events:
            self.store.append_to(conn, batch, turn.stream, turn.events, outbox=rows)
        self.write_rows_to(batch, [turn], rows)
        run_batch(conn, batch)
        return rows

    def write_rows(self, conn: Connection, turns: Sequence[Turn]) -> list[OutboxRow]:
        """Insert the new loop runs, commands and notification outbox rows of ``turns`` in one statement."""
        batch, rows = InsertBatch(), list[OutboxRow]()
        self.write_rows_to(batch, turns, rows)
        batch.execute(conn)
        return rows

    @staticmethod
    def write_rows_to(batch: InsertBatch, turns: Sequence[Turn], outbox: list[OutboxRow]) -> None:
        """The new stages, loop runs, commands and notification outbox rows of ``turns`` as parts of
        ``batch``; the notification rows written go to ``outbox`` when it has run."""
        batch.insert(stage, [row for turn in turns for row in turn.new_stages])
        batch.insert(loop_run, [loop for turn in turns for loop in turn.new_loops.values()])
        batch.insert(command, [row for turn in turns for row in turn.commands])
        notes = [row for turn in turns for row in turn.notes]
        written = batch.insert(
            outbox_table, notes, returning=("outbox_id", "topic", "data", "attributes", "ordering_key")
        )
        batch.after(lambda: outbox.extend(OutboxRow(*r) for r in written.returned))

    # -- claim, read, heartbeat -----------------------------------------------------------------

    def claim(self, command_id: int, worker_id: str) -> dict[str, Any]:
        """``issued → claimed`` for the first caller; the command document with its scope."""
        tenant, org = self.tenant
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            row = conn.execute(
                text(
                    "UPDATE command c SET status = 'claimed', worker_id = :worker, updated_at = now(), "
                    "lease_expires_at = now() + make_interval(secs => :lease) "
                    "WHERE c.command_id = :id AND c.tenant_id = :t AND c.organization_id = :o "
                    "AND c.status = 'issued' AND EXISTS (SELECT 1 FROM execution e "
                    "  WHERE e.execution_id = c.execution_id AND e.status NOT IN ('completed', 'failed', 'cancelled')) "
                    "RETURNING c.command_id"
                ),
                {"id": command_id, "worker": worker_id, "lease": self.lease_s, "t": tenant, "o": org},
            ).first()
            refusal = self._refusal(conn, command_id) if row is None else None
            if refusal is None:
                document = self._claimed(conn, command_id, worker_id, rows)
        if refusal is not None:
            raise refusal  # after the commit: a command of an ended execution stays cancelled
        self.relay.hand_off(rows)
        return document

    def _claimed(self, conn: Connection, command_id: int, worker_id: str, outbox: list[OutboxRow]) -> dict[str, Any]:
        """The document of a command just claimed, after its ``command.claimed`` event."""
        tenant, org = self.tenant
        document = self._document(conn, command_id)
        stream = f"execution/{document['execution_id']}"
        self.store.append_in(
            conn,
            stream,
            [
                self.events.new(
                    "command.claimed",
                    stream_id=stream,
                    aggregate_type="command",
                    aggregate_id=str(command_id),
                    execution_id=document["execution_id"],
                    payload={"command_id": str(command_id), "worker_id": worker_id, "attempt": document["attempt"]},
                    idempotency_key=f"{tenant}/{org}/{document['execution_id']}/command/{command_id}/"
                    f"{document['attempt']}/claimed",
                )
            ],
            outbox=outbox,
        )
        return document

    def _refusal(self, conn: Connection, command_id: int) -> NoetlError:
        tenant, org = self.tenant
        found = conn.execute(
            text(
                "SELECT c.status, c.worker_id, e.status AS execution_status FROM command c "
                "JOIN execution e ON e.execution_id = c.execution_id "
                "WHERE c.command_id = :id AND c.tenant_id = :t AND c.organization_id = :o"
            ),
            {"id": command_id, "t": tenant, "o": org},
        ).first()
        if found is None:
            return NotFound(f"no command {command_id}", code="command_not_found")
        if found.execution_status in ENDED:
            if found.status in OPEN:
                conn.execute(
                    text("UPDATE command SET status = 'cancelled', updated_at = now() WHERE command_id = :id"),
                    {"id": command_id},
                )
            return Conflict(
                f"the execution of command {command_id} already ended ({found.execution_status})",
                code="execution_terminal",
                details={"execution_status": found.execution_status},
            )
        return Conflict(
            f"command {command_id} is already {found.status}",
            code="command_already_claimed",
            details={"status": found.status},
        )

    def get(self, command_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return self._document(conn, command_id)

    def _document(self, conn: Connection, command_id: int) -> dict[str, Any]:
        tenant, org = self.tenant
        row = conn.execute(
            text(
                "SELECT c.command_id, c.execution_id, c.kind, c.step, c.status, c.attempt, c.execution_pool, "
                "c.worker_id, c.lease_expires_at, c.step_run_id, c.trace, c.args, c.iteration, c.item, "
                "e.catalog_id, e.path, e.version, e.workload, e.ctx, e.meta -> 'parent_iter' AS parent_iter, l.mode "
                "FROM command c JOIN execution e ON e.execution_id = c.execution_id "
                "LEFT JOIN loop_run l ON l.step_run_id = c.step_run_id AND c.kind = 'iteration' "
                "WHERE c.command_id = :id AND c.tenant_id = :t AND c.organization_id = :o"
            ),
            {"id": command_id, "t": tenant, "o": org},
        ).first()
        if row is None:
            raise NotFound(f"no command {command_id}", code="command_not_found")
        return self._command_document(conn, row)

    def _command_document(self, conn: Connection | None, row: Any) -> dict[str, Any]:
        """The document a worker runs, from a command's fields and its execution's (attributes of ``row``)."""
        _doc, plans, document = self._compiled(row.catalog_id, conn=conn)
        iteration = None
        if row.kind == "iteration":
            loop = plans[row.step].loop
            assert loop is not None
            iteration = {
                "index": row.iteration,
                "item": row.item,
                "iterator": loop.iterator,
                "parallel": row.mode == "parallel",
            }
        return {
            "command_id": str(row.command_id),
            "execution_id": str(row.execution_id),
            "kind": row.kind,
            "step": row.step,
            "status": row.status,
            "attempt": row.attempt,
            "execution_pool": row.execution_pool,
            "worker_id": row.worker_id,
            "lease_expires_at": row.lease_expires_at.isoformat() if row.lease_expires_at else None,
            "step_run_id": str(row.step_run_id) if row.step_run_id is not None else None,
            "trace": row.trace,
            "playbook": {
                "catalog_id": str(row.catalog_id),
                "path": row.path,
                "version": row.version,
                "document": document,
            },
            "scope": {
                "workload": row.workload,
                "ctx": row.ctx,
                "args": row.args,
                **({"parent_iter": row.parent_iter} if isinstance(row.parent_iter, dict) else {}),
            },
            "iteration": iteration,
        }

    def heartbeat(self, command_id: int, worker_id: str) -> dict[str, Any]:
        """Extend this worker's lease on the command."""
        tenant, org = self.tenant
        with self.engine.begin() as conn:
            row = conn.execute(
                text(
                    "UPDATE command c SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now() "
                    "FROM execution e WHERE c.command_id = :id AND c.tenant_id = :t AND c.organization_id = :o "
                    "AND c.worker_id = :worker AND c.status IN ('claimed', 'started') "
                    "AND e.execution_id = c.execution_id RETURNING c.lease_expires_at, e.status AS execution_status"
                ),
                {"id": command_id, "worker": worker_id, "lease": self.lease_s, "t": tenant, "o": org},
            ).first()
            if row is None:
                exists = conn.execute(
                    text("SELECT 1 FROM command WHERE command_id = :id AND tenant_id = :t AND organization_id = :o"),
                    {"id": command_id, "t": tenant, "o": org},
                ).first()
                if exists is None:
                    raise NotFound(f"no command {command_id}", code="command_not_found")
                raise Conflict(f"command {command_id} is no longer leased to {worker_id}", code="lease_lost")
        if row.execution_status in ENDED:
            raise Conflict(
                f"the execution of command {command_id} already ended ({row.execution_status})",
                code="execution_terminal",
                details={"execution_status": row.execution_status},
            )
        return {"command_id": str(command_id), "lease_expires_at": row.lease_expires_at.isoformat()}

    # -- reports --------------------------------------------------------------------------------

    def report(self, body: WorkerReport) -> dict[str, Any]:
        """Fold a worker's report of one command run; a duplicate changes nothing."""
        command_id = int(body.command_id)
        with self.engine.begin() as conn:
            state = self._lock_execution_of(conn, command_id)
            cmd = self._lock_command(conn, command_id)
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
            turn = Turn(self, state, self.plans_for(state.catalog_id or 0, conn=conn))
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
            handed = [self._command_document(conn, eager)] if eager is not None else []
        self.relay.hand_off(rows)
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
    def _lock_command(conn: Connection, command_id: int) -> Any:
        return conn.execute(
            text(
                "SELECT command_id, execution_id, kind, step, status, attempt, max_attempts, worker_id, args, "
                "step_run_id, iteration, lease_expires_at < now() AS expired FROM command "
                "WHERE command_id = :id FOR UPDATE"
            ),
            {"id": command_id},
        ).one()

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
        conn.execute(
            text(
                "UPDATE command SET status = :status, result = CAST(:result AS jsonb), error = CAST(:error AS jsonb), "
                "lease_expires_at = NULL, updated_at = now() WHERE command_id = :id"
            ),
            {
                "status": "completed" if status == "ok" else "failed",
                "result": _json(result),
                "error": _json(error) if error is not None else None,
                "id": cmd.command_id,
            },
        )
        if state.ended:
            return  # cancelled or failed meanwhile: the outcome is recorded, nothing more runs
        if cmd.kind == "iteration":
            loop = self._loop(conn, cmd.step_run_id)
            turn.changed_loops[str(cmd.step_run_id)] = loop
            turn.iteration_ended(loop, cmd.iteration, status, result, error, patch)
        else:
            apply_patch(state.ctx, patch)
            plan = turn.plans[cmd.step]
            turn.finish_step(
                plan, cmd.args, str(cmd.step_run_id), "step.done" if status == "ok" else "step.failed", result, error
            )
        turn.drain()
        turn.close(state.open_commands - 1)  # less the command that just ended (it was claimed or started)

    @staticmethod
    def _loop(conn: Connection, step_run_id: int) -> dict[str, Any]:
        row = conn.execute(
            text(
                "SELECT step_run_id, execution_id, step, args, mode, max_in_flight, items, next_index, in_flight, "
                "results, ctx_owners, failed_index, error FROM loop_run WHERE step_run_id = :id"
            ),
            {"id": step_run_id},
        ).one()
        return dict(row._mapping)

    # -- reaper ---------------------------------------------------------------------------------

    def reap(self, limit: int = 200) -> dict[str, int]:
        """Re-issue commands whose claim lease expired; fail those out of attempts (``lease_expired``);
        publish again the notifications of commands nobody claimed within ``renotify_after_s``."""
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            expired = conn.execute(
                text(
                    "SELECT command_id, execution_id FROM command WHERE status IN ('claimed', 'started') "
                    "AND lease_expires_at < now() AND tenant_id = :t AND organization_id = :o "
                    "ORDER BY lease_expires_at LIMIT :limit"
                ),
                {"t": tenant, "o": org, "limit": limit},
            ).all()
        counts = {"expired": len(expired), "reissued": 0, "failed": 0}
        rows: list[OutboxRow] = []
        for command_id, execution_id in expired:
            with self.engine.begin() as conn:
                state = self._lock_execution(conn, execution_id)
                cmd = self._lock_command(conn, command_id)
                if cmd.status not in ("claimed", "started") or not cmd.expired:
                    continue  # reported or heartbeated meanwhile
                turn = Turn(self, state, self.plans_for(state.catalog_id or 0, conn=conn))
                if state.ended:
                    conn.execute(
                        text("UPDATE command SET status = 'cancelled', updated_at = now() WHERE command_id = :id"),
                        {"id": command_id},
                    )
                    continue
                if cmd.attempt < cmd.max_attempts:
                    rows += self._reissue(conn, turn, cmd)
                    counts["reissued"] += 1
                else:
                    error = {
                        "kind": "lease_expired",
                        "message": f"the claim lease of command {command_id} expired {cmd.attempt} times",
                        "attempts": cmd.attempt,
                    }
                    self._terminate(conn, turn, cmd, "error", None, error, [], cmd.worker_id)
                    rows += self.write(conn, turn)
                    counts["failed"] += 1
        self.relay.hand_off(rows)
        counts["renotified"] = self.renotify(limit)
        return counts

    def renotify(self, limit: int = 200) -> int:
        """Publish again the notification of every command still ``issued`` ``renotify_after_s`` after
        it was last issued or renotified: the message was lost (a broker that dropped it, a topic
        recreated empty). Only notifications the outbox counts as published are sent again (a pending
        one is the sweep's); the command's ``updated_at`` moves, so each is renotified once a period.
        The number sent."""
        tenant, org = self.tenant
        with self.engine.begin() as conn:
            rows = [
                OutboxRow(r.outbox_id, r.topic, r.data, r.attributes, r.ordering_key)
                for r in conn.execute(
                    _RENOTIFY,
                    {
                        "t": tenant,
                        "o": org,
                        "after_s": self.renotify_after_s,
                        "limit": limit,
                        "pattern": like_prefix(self.command_topic_prefix),
                    },
                )
            ]
        return self.relay.publish_rows(sorted(rows, key=lambda row: row.outbox_id))

    def _reissue(self, conn: Connection, turn: Turn, cmd: Any) -> list[OutboxRow]:
        attempt = cmd.attempt + 1
        cid = str(cmd.command_id)
        issued = turn.emit(
            "command.issued",
            {
                "command_id": cid,
                "step": cmd.step,
                "kind": cmd.kind,
                "step_run_id": str(cmd.step_run_id),
                "execution_pool": turn.state.pool,
                "attempt": attempt,
                "reason": "lease_expired",
                "previous_worker_id": cmd.worker_id,
                **({"iteration": cmd.iteration} if cmd.iteration is not None else {}),
            },
            aggregate_type="command",
            aggregate_id=cid,
            key=turn.key("command", cid, attempt, "issued"),
        )
        conn.execute(
            text(
                "UPDATE command SET status = 'issued', attempt = :attempt, worker_id = NULL, lease_expires_at = NULL, "
                "issued_event_id = :event, updated_at = now() WHERE command_id = :id"
            ),
            {"attempt": attempt, "event": int(issued.event_id), "id": cmd.command_id},
        )
        turn.notes.append(self.note(turn.state, cid, issued.event_id, cmd.step, attempt))
        return self.write(conn, turn)


_EXECUTION_COLUMNS = (
    "SELECT e.execution_id, e.execution_pool, e.path, e.catalog_id, e.trace, e.workload, e.ctx, e.results, "
    "e.tokens_fired, e.status, e.error, e.version, e.meta -> 'parent_iter' AS parent_iter, "
    "(SELECT count(*) FROM command o WHERE o.execution_id = e.execution_id "
    " AND o.status IN ('issued', 'claimed', 'started')) AS open_commands FROM execution e "
)
_LOCK_EXECUTION = text(
    _EXECUTION_COLUMNS + "WHERE e.execution_id = :id AND e.tenant_id = :t AND e.organization_id = :o FOR UPDATE OF e"
)
_LOCK_EXECUTION_OF = text(
    _EXECUTION_COLUMNS + "WHERE e.execution_id = (SELECT execution_id FROM command WHERE command_id = :command "
    "AND tenant_id = :t AND organization_id = :o) AND e.tenant_id = :t AND e.organization_id = :o FOR UPDATE OF e"
)
_RENOTIFY = text(
    "WITH stale AS ("
    "  SELECT command_id FROM command WHERE status = 'issued' AND tenant_id = :t AND organization_id = :o"
    "  AND updated_at < now() - make_interval(secs => :after_s)"
    "  ORDER BY updated_at LIMIT :limit FOR UPDATE SKIP LOCKED"
    "), touched AS ("
    "  UPDATE command c SET updated_at = now() FROM stale WHERE c.command_id = stale.command_id"
    "  RETURNING c.issued_event_id"
    ") "
    "UPDATE outbox o SET status = 'in_flight', available_at = now() + interval '60 seconds' FROM touched "
    "WHERE o.event_id = touched.issued_event_id AND o.topic LIKE :pattern AND o.status = 'published' "
    "RETURNING o.outbox_id, o.topic, o.data, o.attributes, o.ordering_key"
)


def _json(value: Any) -> str:
    from noetl_cloud.envelope import canonical_json

    return canonical_json(value)
