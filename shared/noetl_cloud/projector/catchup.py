"""Which executions the projector's catch-up folds: those whose projection lags the events written
since its last run — never a walk over every execution of the day.

A checkpoint per tenant and organization (``projector_checkpoint``) says how far the log was looked
at (``checked_position``) and what its tip was at the end of the last run (``pending_position`` at
``pending_at``). A run looks at the events in ``(checked_position, pending_position]`` once
``pending_at`` is older than the settle time (their deliveries had time to arrive), through the
event table's ``position`` index; groups them by execution; and keeps the executions whose tracking
position (``projection_tracking``, by its key) is below their last event in that range. When every
one of them was folded, the checkpoint moves: ``checked = pending``, ``pending = the tip now``.
When more lag than a run folds (``limit``), it stays, and the next run looks at the same range
again (what was folded no longer lags).

The first run (no checkpoint) starts at the first event of the oldest execution started within the
window, and looks up to the last event stored before the settle time.

An event committed more than the settle time after its position was assigned (a transaction open
that long) can be missed by the range; its own delivery still folds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

_CHECKPOINT = text(
    "SELECT checked_position, pending_position, pending_at < now() - make_interval(secs => :settle_s) AS settled "
    "FROM projector_checkpoint WHERE tenant_id = :t AND organization_id = :o FOR UPDATE"
)
_TIP = text("SELECT COALESCE(max(position), 0) FROM event")
_WINDOW_START = text(
    "SELECT min(e.position) FROM event e WHERE e.tenant_id = :t AND e.organization_id = :o AND e.execution_id = ("
    "  SELECT x.execution_id FROM execution x WHERE x.tenant_id = :t AND x.organization_id = :o"
    "  AND x.created_at >= now() - make_interval(secs => :window_s) ORDER BY x.created_at LIMIT 1)"
)
# The first run's bound: a backward walk of the position index over the last ``settle_s`` of writes.
_SETTLED_TIP = text(
    "SELECT position FROM event WHERE ingest_time < now() - make_interval(secs => :settle_s) "
    "ORDER BY position DESC LIMIT 1"
)
LAGGING = text(
    "SELECT w.execution_id FROM ("
    "  SELECT e.execution_id, max(e.position) AS last FROM event e"
    "  WHERE e.position > :lo AND e.position <= :hi AND e.tenant_id = :t AND e.organization_id = :o"
    "  AND e.execution_id IS NOT NULL GROUP BY e.execution_id"
    ") w LEFT JOIN projection_tracking p"
    "  ON p.tenant_id = :t AND p.organization_id = :o AND p.execution_id = w.execution_id "
    "WHERE COALESCE(p.position, 0) < w.last ORDER BY w.last LIMIT :limit"
)
_ADVANCE = text(
    "INSERT INTO projector_checkpoint (tenant_id, organization_id, checked_position, pending_position, pending_at) "
    "VALUES (:t, :o, :checked, :pending, now()) ON CONFLICT (tenant_id, organization_id) DO UPDATE SET "
    "checked_position = GREATEST(projector_checkpoint.checked_position, EXCLUDED.checked_position), "
    "pending_position = EXCLUDED.pending_position, pending_at = EXCLUDED.pending_at"
)


@dataclass(frozen=True)
class Run:
    behind: list[str]  # executions to fold, oldest last event first
    checked: int  # the position every event up to which was looked at, once they are folded
    tip: int  # the log's tip now: the next run's range ends here
    complete: bool  # every lagging execution of the range is in ``behind``


def lagging(
    conn: Connection, tenant_id: str, organization_id: str, *, window_s: float, settle_s: float, limit: int
) -> Run:
    """The executions of this scope whose projection lags the events of the range due now."""
    scope = {"t": tenant_id, "o": organization_id}
    tip = int(conn.execute(_TIP).scalar_one())
    checkpoint = conn.execute(_CHECKPOINT, {**scope, "settle_s": settle_s}).first()
    if checkpoint is None:
        start = conn.execute(_WINDOW_START, {**scope, "window_s": window_s}).scalar()
        lo = tip if start is None else int(start) - 1
        hi = int(conn.execute(_SETTLED_TIP, {"settle_s": settle_s}).scalar() or 0)
    elif checkpoint.settled:
        lo, hi = int(checkpoint.checked_position), int(checkpoint.pending_position)
    else:  # the range due next is not settled yet
        return Run([], int(checkpoint.checked_position), tip, complete=False)
    if hi <= lo:
        return Run([], max(lo, hi), tip, complete=True)
    params = {**scope, "lo": lo, "hi": hi, "limit": limit}
    behind = [str(r.execution_id) for r in conn.execute(LAGGING, params)]
    return Run(behind, hi, tip, complete=len(behind) < limit)


def advance(conn: Connection, tenant_id: str, organization_id: str, run: Run) -> None:
    """Record that every event up to ``run.checked`` was looked at; the next range ends at ``run.tip``."""
    conn.execute(_ADVANCE, {"t": tenant_id, "o": organization_id, "checked": run.checked, "pending": run.tip})
