"""The reaper: commands whose claim lease ran out, and notifications nobody acted on.

* :meth:`Reaper.reap` issues again a command whose claim lease expired, or fails it with
  ``lease_expired`` once its attempts are spent (folding that failure into its execution);
* :meth:`Reaper.renotify` publishes again the notification of a command still ``issued`` after
  ``renotify_after_s``.

A mixin of :class:`~noetl_cloud.control.orchestrator.Orchestrator`; it declares what it uses of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, text

from noetl_cloud.control.turn import ExecState, Turn
from noetl_cloud.db.engine import CUSTOM_PLANS
from noetl_cloud.engine.model import StepPlan
from noetl_cloud.engine.templates import Renderer
from noetl_cloud.envelope import EventFactory
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow, like_prefix
from noetl_cloud.ids import SnowflakeGenerator


class Reaper:
    """Lease expiry and renotification of commands (a mixin of the orchestrator)."""

    engine: Engine
    relay: OutboxRelay
    command_topic_prefix: str
    renotify_after_s: float
    # What a turn needs of its host (control.turn.TurnHost):
    events: EventFactory
    ids: SnowflakeGenerator
    renderer: Renderer
    max_tokens: int
    max_attempts: int

    if TYPE_CHECKING:

        @property
        def tenant(self) -> tuple[str, str]: ...

        def note(self, state: ExecState, command_id: str, event_id: str, step: str, attempt: int) -> dict[str, Any]: ...

        def notification(
            self,
            execution_id: str,
            pool: str,
            trace: dict[str, Any] | None,
            command_id: str,
            event_id: str,
            step: str,
            attempt: int,
        ) -> dict[str, Any]: ...

        def plans_for(
            self, catalog_id: int, content: str | None = None, conn: Connection | None = None
        ) -> dict[str, StepPlan]: ...

        def _lock_execution(self, conn: Connection, execution_id: int) -> ExecState: ...

        @staticmethod
        def _lock_command(
            conn: Connection,
            command_id: int,
            pool: str | None = None,
            tenant: str | None = None,
            org: str | None = None,
        ) -> Any: ...

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
        ) -> None: ...

        def write(self, conn: Connection, turn: Turn) -> list[OutboxRow]: ...

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
        recreated empty). Only commands whose notification is no longer in the outbox are taken (it was
        published, and deleted; a pending one is the sweep's); the notification is built again from the
        command and its execution, and published as is (no outbox row). The command's ``updated_at``
        moves, so each is renotified once a period. The number sent."""
        tenant, org = self.tenant
        with self.engine.begin() as conn:
            conn.execute(CUSTOM_PLANS)  # which commands are stale depends on the data
            notes = [
                self.notification(
                    str(r.execution_id),
                    r.execution_pool,
                    r.trace,
                    str(r.command_id),
                    str(r.issued_event_id),
                    r.step,
                    r.attempt,
                )
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
        messages = [OutboxRow(0, n["topic"], n["data"], n["attributes"], n["ordering_key"]).message() for n in notes]
        return sum(server_id is not None for server_id in self.relay.publisher.publish(messages)) if messages else 0

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


# Reads ``ix_command_issued_stale`` (tenant, organization, updated_at WHERE status = 'issued', migration
# 0009): the stale issued commands oldest first, none of the ended ones (tests/integration/test_reaper_index.py).
_RENOTIFY = text(
    "WITH stale AS ("
    "  SELECT c.command_id FROM command c WHERE c.status = 'issued' AND c.tenant_id = :t AND c.organization_id = :o"
    "  AND c.updated_at < now() - make_interval(secs => :after_s)"
    "  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = c.issued_event_id AND o.topic LIKE :pattern)"
    "  ORDER BY c.updated_at LIMIT :limit FOR UPDATE OF c SKIP LOCKED"
    ") "
    "UPDATE command c SET updated_at = now() FROM stale, execution e "
    "WHERE c.command_id = stale.command_id AND e.execution_id = c.execution_id "
    "RETURNING c.command_id, c.execution_id, c.step, c.attempt, c.issued_event_id, e.execution_pool, e.trace"
)
