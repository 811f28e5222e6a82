"""Reading executions for operators: the filtered, paginated list and an execution's events after a point.

Both are one statement each against the ``execution`` and ``event`` tables (no projection table of its
own: the ``execution`` row *is* the execution's projection, kept by the orchestrator in the transaction
of every turn):

* :meth:`ExecutionQueries.page` is one ``SELECT ... ORDER BY created_at DESC, execution_id DESC LIMIT n+1``
  served by the index on ``(tenant_id, organization_id, created_at)`` (the ``parent`` filter by the one
  on ``parent_execution_id``); the extra row says whether a next page exists. The cursor is the last
  row's ``(created_at, execution_id)``, opaque to callers (base64url JSON), so a page never repeats or
  skips a row however many executions start meanwhile.
* :meth:`ExecutionQueries.events_after` is one statement that scopes the execution to the tenant,
  resolves ``after`` (an event id of the execution) to its log position and returns the next events in
  log order, with the execution's status so a follower knows when to stop. Within one execution the log
  order is the commit order: every turn of an execution holds its row lock.

Filters are parsed by :func:`parse_filters` (pure: the query string in, a :class:`Filters` out, a
400 with a stable code for anything it cannot use).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from noetl_cloud.db.schema import event as event_table
from noetl_cloud.errors import BadRequest, NotFound
from noetl_cloud.eventlog.postgres import envelope_from_row

STATUSES = ("started", "completed", "failed", "cancelled")
ENDED = ("completed", "failed", "cancelled")
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
MAX_EVENTS = 1000
MAX_WAIT_S = 25.0
_ID = re.compile(r"^[0-9]{1,19}$")
_POOL = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_MAX_TEXT = 512
FILTERS = ("status", "path", "version", "subscription", "pool", "parent", "since", "until", "cursor", "limit")


@dataclass(frozen=True)
class Filters:
    """What ``GET /api/executions`` may be asked; every field narrows the list (``None``: no filter)."""

    statuses: tuple[str, ...] = ()
    path: str | None = None
    version: int | None = None
    subscription: str | None = None
    pool: str | None = None
    parent: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: tuple[datetime, int] | None = None
    limit: int = DEFAULT_LIMIT
    params: dict[str, Any] = field(default_factory=dict)


def _bad(parameter: str, message: str, code: str = "invalid_filter") -> BadRequest:
    return BadRequest(message, code=code, details={"parameter": parameter})


def _time(name: str, value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _bad(name, f"{name} must be an ISO 8601 time with its offset (2026-11-25T16:00:00Z)") from None
    if parsed.tzinfo is None:
        raise _bad(name, f"{name} must carry an offset (Z or +00:00)")
    return parsed


def _int(name: str, value: str, *, low: int, high: int) -> int:
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        raise _bad(name, f"{name} must be an integer from {low} to {high}")
    return int(value)


def encode_cursor(created_at: datetime, execution_id: int) -> str:
    raw = json.dumps([created_at.isoformat(), str(execution_id)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        at, eid = json.loads(raw)
        decoded = (datetime.fromisoformat(at), int(eid))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise _bad("cursor", "cursor is not one this API handed out", code="invalid_cursor") from None
    if decoded[0].tzinfo is None or not 0 < decoded[1] < 2**63:
        raise _bad("cursor", "cursor is not one this API handed out", code="invalid_cursor")
    return decoded


def parse_filters(args: Mapping[str, str]) -> Filters:
    """The filters of a query string; 400 ``unknown_filter`` / ``invalid_filter`` / ``invalid_cursor``."""
    unknown = sorted(set(args) - set(FILTERS))
    if unknown:
        raise BadRequest(
            f"unknown filter {unknown[0]!r}; the filters are {', '.join(FILTERS)}",
            code="unknown_filter",
            details={"parameter": unknown[0]},
        )
    for name, value in args.items():
        if len(value) > _MAX_TEXT:
            raise _bad(name, f"{name} is longer than {_MAX_TEXT} characters")
    statuses = tuple(s for s in args.get("status", "").split(",") if s)
    for status in statuses:
        if status not in STATUSES:
            raise _bad("status", f"status must be one or more of {', '.join(STATUSES)} (comma-separated)")
    version = args.get("version") or None
    if version is not None and not args.get("path"):
        raise _bad("version", "version filters a playbook's versions: give path too")
    pool = args.get("pool") or None
    if pool is not None and not _POOL.match(pool):
        raise _bad("pool", "pool must be a pool name (lower-case letters, digits, dashes)")
    parent = args.get("parent") or None
    if parent is not None and not _ID.match(parent):
        raise _bad("parent", "parent must be an execution id (decimal)")
    since = _time("since", args["since"]) if args.get("since") else None
    until = _time("until", args["until"]) if args.get("until") else None
    if since is not None and until is not None and since >= until:
        raise _bad("until", "until must be later than since")
    return Filters(
        statuses=statuses,
        path=args.get("path") or None,
        version=_int("version", version, low=1, high=2**31 - 1) if version is not None else None,
        subscription=args.get("subscription") or None,
        pool=pool,
        parent=int(parent) if parent is not None else None,
        since=since,
        until=until,
        cursor=decode_cursor(args["cursor"]) if args.get("cursor") else None,
        limit=_int("limit", args["limit"], low=1, high=MAX_LIMIT) if args.get("limit") else DEFAULT_LIMIT,
    )


def _where(filters: Filters) -> tuple[list[str], dict[str, Any]]:
    clauses = ["tenant_id = :t", "organization_id = :o"]
    params: dict[str, Any] = {}
    if filters.statuses:
        names = [f"s{i}" for i in range(len(filters.statuses))]
        clauses.append(f"status IN ({', '.join(':' + n for n in names)})")
        params.update(zip(names, filters.statuses, strict=True))
    simple = (
        ("path", "path = :path", filters.path),
        ("version", "version = :version", filters.version),
        ("subscription", "meta ->> 'subscription_path' = :subscription", filters.subscription),
        ("pool", "execution_pool = :pool", filters.pool),
        ("parent", "parent_execution_id = :parent", filters.parent),
        ("since", "created_at >= :since", filters.since),
        ("until", "created_at < :until", filters.until),
    )
    for name, clause, value in simple:
        if value is not None:
            clauses.append(clause)
            params[name] = value
    if filters.cursor is not None:
        clauses.append("(created_at, execution_id) < (:cursor_at, :cursor_id)")
        params["cursor_at"], params["cursor_id"] = filters.cursor
    return clauses, params


_SUMMARY = (
    "execution_id, path, version, status, execution_pool, parent_execution_id, created_at, updated_at, "
    "ended_at, meta ->> 'subscription_path' AS subscription, error"
)


def summary(row: Any) -> dict[str, Any]:
    """One execution as the list shows it."""
    m = row._mapping
    return {
        "execution_id": str(m["execution_id"]),
        "path": m["path"],
        "version": m["version"],
        "status": m["status"],
        "execution_pool": m["execution_pool"],
        "parent_execution_id": str(m["parent_execution_id"]) if m["parent_execution_id"] else None,
        "subscription": m["subscription"],
        "created_at": m["created_at"].isoformat(),
        "updated_at": m["updated_at"].isoformat(),
        "ended_at": m["ended_at"].isoformat() if m["ended_at"] else None,
        "duration_ms": _duration_ms(m["created_at"], m["ended_at"]),
        "error": m["error"],
    }


def _duration_ms(start: datetime, end: datetime | None) -> int | None:
    return None if end is None else int((end - start).total_seconds() * 1000)


_EVENT_COLUMNS = ", ".join(f"e.{c.name}" for c in event_table.c)
_EVENTS_AFTER = text(
    "WITH x AS (SELECT execution_id, status FROM execution "
    " WHERE execution_id = :id AND tenant_id = :t AND organization_id = :o), "
    "a AS (SELECT position FROM event WHERE event_id = :after AND execution_id = :id) "
    f"SELECT x.status, (SELECT position FROM a) AS after_position, {_EVENT_COLUMNS} FROM x "
    "LEFT JOIN event e ON e.execution_id = x.execution_id AND e.position > COALESCE((SELECT position FROM a), 0) "
    "ORDER BY e.position LIMIT :limit"
)


def event_view(row: Any) -> dict[str, Any]:
    """One event: its envelope (spec §3.1) and its ``position`` in the log."""
    return {**envelope_from_row(row).model_dump(mode="json"), "position": row.position}


class ExecutionQueries:
    """The read side of executions for the API, the CLI and the console."""

    def __init__(
        self,
        engine: Engine,
        tenant: tuple[str, str],
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.tenant = tenant
        self._sleep = sleep
        self._clock = clock

    def page(self, filters: Filters) -> dict[str, Any]:
        """One page of executions, newest first, and the cursor of the next (``None`` on the last)."""
        clauses, params = _where(filters)
        statement = text(
            f"SELECT {_SUMMARY} FROM execution WHERE {' AND '.join(clauses)} "
            "ORDER BY created_at DESC, execution_id DESC LIMIT :limit"
        )
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            rows = conn.execute(statement, {**params, "t": tenant, "o": org, "limit": filters.limit + 1}).all()
        more = len(rows) > filters.limit
        rows = rows[: filters.limit]
        cursor = encode_cursor(rows[-1].created_at, rows[-1].execution_id) if more else None
        return {"items": [summary(r) for r in rows], "next_cursor": cursor}

    def events_after(self, execution_id: int, after: int | None, *, limit: int = MAX_EVENTS) -> dict[str, Any]:
        """The events of ``execution_id`` after the event ``after`` (all of them when ``None``), in log order."""
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            rows = conn.execute(
                _EVENTS_AFTER, {"id": execution_id, "t": tenant, "o": org, "after": after or 0, "limit": limit}
            ).all()
        if not rows:
            raise NotFound(f"no execution {execution_id}", code="execution_not_found")
        if after is not None and rows[0].after_position is None:
            raise BadRequest(
                f"after={after} is not an event of execution {execution_id}",
                code="invalid_after",
                details={"parameter": "after"},
            )
        events = [event_view(r) for r in rows if r.event_id is not None]
        status = rows[0].status
        last = events[-1]["event_id"] if events else (str(after) if after is not None else None)
        return {
            "execution_id": str(execution_id),
            "tenant_id": tenant,
            "organization_id": org,
            "status": status,
            "ended": status in ENDED,
            "events": events,
            "next_after": last,
            "more": len(events) == limit,
        }

    def follow(self, execution_id: int, after: int | None, wait_s: float) -> dict[str, Any]:
        """Long poll: :meth:`events_after` as soon as it has events or the execution ended, else again
        (every 100 ms, growing to 1 s) until ``wait_s`` passed; then the empty answer."""
        deadline = self._clock() + min(wait_s, MAX_WAIT_S)
        pause = 0.1
        while True:
            answer = self.events_after(execution_id, after)
            if answer["events"] or answer["ended"] or self._clock() >= deadline:
                return answer
            self._sleep(min(pause, max(deadline - self._clock(), 0.0)))
            pause = min(pause * 2, 1.0)
