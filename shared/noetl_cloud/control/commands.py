"""Command access for workers: claim a command, read its document, extend its lease.

* :meth:`CommandAccess.claim` is the atomic ``issued → claimed`` transition and the command document
  (with its ``command.claimed`` event); a refused claim says why (``command_not_found``,
  ``command_already_claimed``, ``execution_terminal``) and cancels a command of an ended execution.
* :meth:`CommandAccess.heartbeat` extends the claim lease of the worker that holds it.

A mixin of :class:`~noetl_cloud.control.orchestrator.Orchestrator`; it declares what it uses of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.control.turn import ENDED, OPEN
from noetl_cloud.db.rows import RowsStatement
from noetl_cloud.engine.model import StepPlan
from noetl_cloud.envelope import EventFactory
from noetl_cloud.errors import Conflict, NoetlError, NotFound
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow
from noetl_cloud.spec import PlaybookDoc


class CommandAccess:
    """Claim, read and heartbeat of commands (a mixin of the orchestrator)."""

    engine: Engine
    store: PostgresEventStore
    relay: OutboxRelay
    events: EventFactory
    lease_s: float

    if TYPE_CHECKING:

        @property
        def tenant(self) -> tuple[str, str]: ...

        def _compiled(
            self, catalog_id: int, content: str | None = None, conn: Connection | None = None
        ) -> tuple[PlaybookDoc, dict[str, StepPlan], dict[str, Any]]: ...

    def claim(self, command_id: int, worker_id: str) -> dict[str, Any]:
        """``issued → claimed`` for the first caller; the command document with its scope."""
        tenant, org = self.tenant
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            params = {"id": command_id, "worker": worker_id, "lease": self.lease_s, "t": tenant, "o": org}
            row = _CLAIM(conn, params).first()
            refusal = self._refusal(conn, command_id) if row is None else None
            if refusal is None:
                document = self._claimed(conn, row, worker_id, rows, {})
        if refusal is not None:
            raise refusal  # after the commit: a command of an ended execution stays cancelled
        self.relay.hand_off(rows)
        return document

    def claim_queued(self, pool: str, worker_id: str, limit: int = 1) -> list[dict[str, Any]]:
        """Claim the ``limit`` oldest commands waiting in ``pool`` for ``worker_id`` (their notifications,
        when they arrive, find them claimed); their documents, oldest first (none when none is waiting).
        A command of an ended execution is left for the claim that cancels it."""
        tenant, org = self.tenant
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            claimed = sorted(
                _CLAIM_QUEUED(
                    conn, {"pool": pool, "worker": worker_id, "lease": self.lease_s, "t": tenant, "o": org, "n": limit}
                ).all(),
                key=lambda row: int(row.command_id),
            )
            heads: dict[str, int] = {}
            documents = [self._claimed(conn, row, worker_id, rows, heads) for row in claimed]
        self.relay.hand_off(rows)
        return documents

    def _claimed(
        self, conn: Connection, row: Any, worker_id: str, outbox: list[OutboxRow], heads: dict[str, int]
    ) -> dict[str, Any]:
        """The document of a command just claimed (``row``: a row of :func:`_claim`), after its
        ``command.claimed`` event; ``heads`` holds the stream versions this transaction appended up to."""
        tenant, org = self.tenant
        command_id = int(row.command_id)
        document = self._command_document(conn, row)
        stream = f"execution/{document['execution_id']}"
        sealed = self.store.append_in(
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
            head=heads.get(stream, row.head),
        )
        heads[stream] = sealed[-1].stream_version
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

    def _command_document(self, conn: Connection | None, row: Any, workload: bool = True) -> dict[str, Any]:
        """The document a worker runs, from a command's fields and its execution's (attributes of ``row``);
        without the execution's workload when ``workload`` is false (the worker holds it)."""
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
                **({"workload": row.workload} if workload else {}),
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


def _claim(which: str) -> RowsStatement:
    """``issued → claimed`` for ``:worker`` of the command ``which`` names, while its execution lives:
    the claimed commands' document rows (as :meth:`CommandAccess._document` reads them), each with its
    execution stream's version (``head``: the ``command.claimed`` event is sealed from it), in one
    round trip."""
    return RowsStatement(
        "WITH claimed AS (UPDATE command c SET status = 'claimed', worker_id = :worker, updated_at = now(), "
        "lease_expires_at = now() + make_interval(secs => :lease) "
        f"WHERE c.command_id {which} AND c.status = 'issued' AND EXISTS (SELECT 1 FROM execution e "
        "  WHERE e.execution_id = c.execution_id AND e.status NOT IN ('completed', 'failed', 'cancelled')) "
        "RETURNING c.*) "
        "SELECT c.command_id, c.execution_id, c.kind, c.step, c.status, c.attempt, c.execution_pool, "
        "c.worker_id, c.lease_expires_at, c.step_run_id, c.trace, c.args, c.iteration, c.item, "
        "e.catalog_id, e.path, e.version, e.workload, e.ctx, e.meta -> 'parent_iter' AS parent_iter, l.mode, "
        "(SELECT s.version FROM stream s WHERE s.stream_id = 'execution/' || c.execution_id) AS head "
        "FROM claimed c JOIN execution e ON e.execution_id = c.execution_id "
        "LEFT JOIN loop_run l ON l.step_run_id = c.step_run_id AND c.kind = 'iteration'"
    )


_CLAIM = _claim("= :id AND c.tenant_id = :t AND c.organization_id = :o")
# The ``:n`` oldest commands waiting in a pool (the partial index ix_command_issued).
_CLAIM_QUEUED = _claim(
    "= ANY(ARRAY(SELECT q.command_id FROM command q WHERE q.status = 'issued' AND q.tenant_id = :t "
    "  AND q.organization_id = :o AND q.execution_pool = :pool ORDER BY q.command_id LIMIT :n FOR UPDATE SKIP LOCKED))"
)
