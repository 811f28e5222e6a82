"""An execution's rows: lock one into an :class:`ExecState`, and write what a :class:`Turn` collected.

* :meth:`ExecutionRows._lock_execution` / :meth:`ExecutionRows._lock_execution_of` take the execution's
  row lock (``FOR UPDATE``) and load its token state, with its count of open commands, in one round trip;
* :meth:`ExecutionRows.write` writes one turn of an existing execution (state, loops, events, stages,
  commands, notifications) in one statement after the stream head's bump;
  :meth:`ExecutionRows.write_rows_to` adds the new rows of turns to a batch (also used by ``executions.py``).

A mixin of :class:`~noetl_cloud.control.orchestrator.Orchestrator`; it declares what it uses of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from noetl_cloud.control.turn import ENDED, ExecState, Turn
from noetl_cloud.control.workloads import WorkloadCache
from noetl_cloud.db.bulk import InsertBatch
from noetl_cloud.db.rows import RowsStatement
from noetl_cloud.db.schema import command, loop_run, stage
from noetl_cloud.db.schema import outbox as outbox_table
from noetl_cloud.errors import NoetlError, NotFound
from noetl_cloud.eventlog.postgres import PostgresEventStore, run_batch
from noetl_cloud.eventlog.relay import OutboxRow


class ExecutionRows:
    """Loading and writing the rows of executions (a mixin of the orchestrator)."""

    store: PostgresEventStore
    workloads: WorkloadCache

    if TYPE_CHECKING:

        @property
        def tenant(self) -> tuple[str, str]: ...

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

    def _locked(
        self, conn: Connection, statement: RowsStatement, params: dict[str, Any], missing: NoetlError
    ) -> ExecState:
        tenant, org = self.tenant
        row = statement(conn, {**params, "t": tenant, "o": org, "known": self.workloads.known()}).first()
        if row is None:
            raise missing
        workload = row.workload
        if workload is None:  # held here (control/workloads.py), unless another thread evicted it since
            workload = self.workloads.get(row.execution_id)
            if workload is None:
                workload = conn.execute(_WORKLOAD, {"id": row.execution_id}).scalar_one()
        else:
            self.workloads.offer(row.execution_id, workload, row.workload_bytes)
        return ExecState(
            execution_id=str(row.execution_id),
            tenant_id=tenant,
            organization_id=org,
            pool=row.execution_pool,
            path=row.path,
            catalog_id=row.catalog_id,
            trace=row.trace,
            workload=workload,
            ctx=row.ctx,
            results=row.results,
            tokens_fired=row.tokens_fired,
            status=row.status,
            error=row.error,
            version=row.version,
            parent_iter=row.parent_iter,
            subscription=row.subscription_path,
            probe=row.probe if isinstance(row.probe, dict) else None,
        )

    def write(self, conn: Connection, turn: Turn) -> list[OutboxRow]:
        """Write one turn of an existing execution: state, the commands it ended, events, commands, loops,
        notifications, in one statement. With the stream's head read under the execution's lock
        (``turn.head``) that is one round trip; when a claim appended to the stream since, the statement
        writes nothing and the turn is written again after the head's bump (two round trips, as always
        without a head)."""
        s = turn.state
        if s.status == "failed":  # not in the batch: one statement may not update a row twice
            conn.execute(
                text(
                    "UPDATE command SET status = 'cancelled', updated_at = now() "
                    "WHERE execution_id = :id AND status IN ('issued', 'claimed', 'started')"
                ),
                {"id": int(s.execution_id)},
            )
        if turn.head is not None:
            rows = self._write_batch(conn, turn, turn.head)
            if rows is not None:
                return rows
        rows = self._write_batch(conn, turn, None)
        assert rows is not None  # without a head the batch has no precondition
        return rows

    def _write_batch(self, conn: Connection, turn: Turn, head: int | None) -> list[OutboxRow] | None:
        s = turn.state
        ended = s.status in ENDED
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
        for outcome in turn.ended_commands:
            batch.statement(
                "UPDATE command SET status = :status, result = CAST(:result AS jsonb), "
                "error = CAST(:error AS jsonb), lease_expires_at = NULL, updated_at = now() WHERE command_id = :id",
                outcome,
            )
        for loop in turn.changed_loops.values():
            batch.statement(
                "UPDATE loop_run SET next_index = :next_index, in_flight = :in_flight, "
                "ctx_owners = CAST(:owners AS jsonb), "
                "failed_index = :failed_index, error = CAST(:error AS jsonb) WHERE step_run_id = :id",
                {
                    "next_index": loop["next_index"],
                    "in_flight": loop["in_flight"],
                    "owners": _json(loop["ctx_owners"]),
                    "failed_index": loop["failed_index"],
                    "error": _json(loop["error"]) if loop["error"] is not None else None,
                    "id": loop["step_run_id"],
                },
            )
        if turn.events:
            self.store.append_to(conn, batch, turn.stream, turn.events, outbox=rows, head=head)
        self.write_rows_to(batch, [turn], rows)
        return rows if run_batch(conn, batch) else None

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


_EXECUTION_COLUMNS = (
    "SELECT e.execution_id, e.execution_pool, e.path, e.catalog_id, e.trace, "
    "CASE WHEN e.execution_id = ANY(CAST(:known AS bigint[])) THEN NULL ELSE e.workload END AS workload, "
    "pg_column_size(e.workload) AS workload_bytes, e.ctx, e.results, "
    "e.tokens_fired, e.status, e.error, e.version, e.meta -> 'parent_iter' AS parent_iter, "
    "e.meta ->> 'subscription_path' AS subscription_path, e.meta -> 'spool' -> 'probe' AS probe FROM execution e "
)
_WORKLOAD = text("SELECT workload FROM execution WHERE execution_id = :id")
_LOCK_EXECUTION = RowsStatement(
    _EXECUTION_COLUMNS + "WHERE e.execution_id = :id AND e.tenant_id = :t AND e.organization_id = :o FOR UPDATE OF e"
)
_LOCK_EXECUTION_OF = RowsStatement(
    _EXECUTION_COLUMNS + "WHERE e.execution_id = (SELECT execution_id FROM command WHERE command_id = :command "
    "AND tenant_id = :t AND organization_id = :o) AND e.tenant_id = :t AND e.organization_id = :o FOR UPDATE OF e"
)


def _json(value: Any) -> str:
    from noetl_cloud.envelope import canonical_json

    return canonical_json(value)
