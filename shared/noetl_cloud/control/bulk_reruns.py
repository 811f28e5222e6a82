"""Bulk re-run: every ended execution a filter of the executions list matches, re-run as one operation.

``POST /api/executions/reruns`` ``{"filter": {...}, "max": n, "idempotency_key": k}`` matches the
executions (the list's filters: ``status`` -- ``failed`` when not given, ended statuses only --, ``path``,
``version``, ``subscription``, ``pool``, ``parent``, ``since``, ``until``), at most ``max`` of them
(default 100, at most 1000: more is 400 ``too_many_executions`` with the count it stopped at, before
anything starts), records the operation with the matched ids (a snapshot: executions that fail later
are not in it) and answers 202 with the record; a background thread re-runs each one as
:func:`~noetl_cloud.control.reruns.rerun` does (a new execution linked by ``meta.rerun_of``), writing the
record's progress after each. ``GET /api/executions/reruns/{id}`` reads the record.

Idempotent under retry: the idempotency key (the client's; the CLI makes one per command) is unique per
tenant, so a retried ``POST`` answers 200 with the operation the first one started (409
``idempotency_key_reused`` if the filter or max differ). Each re-run carries a dedup key of the operation
and the original, so an operation resumed after its process died (a retried ``POST`` finding it
``running`` with no progress for :data:`STALE_S`) starts none twice: the re-runs done before answer
``duplicate`` with the execution they started.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

from flask import Blueprint, g
from sqlalchemy import Engine, text

from noetl_cloud.control import reruns
from noetl_cloud.control.execution_queries import ENDED, ExecutionQueries, _where, parse_filters
from noetl_cloud.control.executions import ExecutionService
from noetl_cloud.control.models import MAX_MAX, BulkRerun
from noetl_cloud.errors import BadRequest, Conflict, NoetlError, NotFound
from noetl_cloud.web import json_body

log = logging.getLogger(__name__)

#: A running operation without progress for this long is resumed by a retried request.
STALE_S = 120
_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_OPERATION = re.compile(r"^[0-9a-f]{32}$")
_FILTERS = ("status", "path", "version", "subscription", "pool", "parent", "since", "until")


_COLUMNS = (
    "operation_id, idempotency_key, filter, max_count, state, originals, results, requested_by, "
    "created_at, updated_at, finished_at, (updated_at < now() - make_interval(secs => :stale)) AS stale"
)


def view(row: Any) -> dict[str, Any]:
    """An operation as the API answers it: its filter, its counts and each re-run so far."""
    m = row._mapping
    results: list[dict[str, Any]] = m["results"]
    return {
        "operation_id": m["operation_id"],
        "idempotency_key": m["idempotency_key"],
        "filter": m["filter"],
        "max": m["max_count"],
        "state": m["state"],
        "matched": len(m["originals"]),
        "done": len(results),
        "started": sum(r["status"] == "started" for r in results),
        "duplicates": sum(r["status"] == "duplicate" for r in results),
        "failed": sum(r["status"] == "error" for r in results),
        "results": results,
        "requested_by": m["requested_by"],
        "created_at": m["created_at"].isoformat(),
        "updated_at": m["updated_at"].isoformat(),
        "finished_at": m["finished_at"].isoformat() if m["finished_at"] else None,
    }


def normalized_filter(raw: dict[str, str]) -> dict[str, str]:
    """The filter as stored and compared: known names, non-empty values, ``status`` defaulting to failed."""
    unknown = sorted(set(raw) - set(_FILTERS))
    if unknown:
        raise BadRequest(
            f"unknown filter {unknown[0]!r}; the filters are {', '.join(_FILTERS)}",
            code="unknown_filter",
            details={"parameter": unknown[0]},
        )
    clean = {k: v.strip() for k, v in raw.items() if v.strip()}
    clean.setdefault("status", "failed")
    parse_filters(clean)  # 400 invalid_filter for anything the list would refuse
    for status in clean["status"].split(","):
        if status and status not in ENDED:
            raise BadRequest(
                f"only executions that ended are re-run: status must be among {', '.join(ENDED)}",
                code="invalid_filter",
                details={"parameter": "status"},
            )
    return dict(sorted(clean.items()))


class BulkReruns:
    """Starts, runs and reads bulk re-run operations (one instance per app)."""

    def __init__(
        self,
        engine: Engine,
        queries: ExecutionQueries,
        executions: ExecutionService,
        *,
        background: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.engine = engine
        self.queries = queries
        self.executions = executions
        self.tenant = queries.tenant
        self.background = background or _thread

    def start(self, request: BulkRerun, *, by: str | None = None) -> tuple[dict[str, Any], bool]:
        """The operation for ``request``: a new one (``True``), or the one its idempotency key started."""
        key = request.idempotency_key
        if key is not None and not _KEY.match(key):
            raise BadRequest(
                "idempotency_key must be 1-128 letters, digits, dots, colons, dashes or underscores",
                code="invalid_idempotency_key",
                details={"parameter": "idempotency_key"},
            )
        which = normalized_filter(request.filter)
        if key is not None and (existing := self._by_key(key)) is not None:
            return self._again(existing, which, request.max), False
        originals = self._match(which, request.max)
        operation_id = uuid.uuid4().hex
        tenant, org = self.tenant
        with self.engine.begin() as conn:
            row = conn.execute(
                text(
                    "INSERT INTO rerun_operation (operation_id, tenant_id, organization_id, idempotency_key, filter, "
                    " max_count, state, originals, requested_by) VALUES (:id, :t, :o, :key, CAST(:filter AS jsonb), "
                    " :max, :state, CAST(:originals AS jsonb), :by) "
                    f"ON CONFLICT (tenant_id, organization_id, idempotency_key) DO NOTHING RETURNING {_COLUMNS}"
                ),
                {
                    "id": operation_id,
                    "t": tenant,
                    "o": org,
                    "key": key or operation_id,
                    "filter": json.dumps(which),
                    "max": request.max,
                    "state": "running" if originals else "done",
                    "originals": json.dumps([str(i) for i in originals]),
                    "by": by,
                    "stale": STALE_S,
                },
            ).first()
        if row is None:  # a concurrent request with the same key inserted first
            existing = self._by_key(str(key))
            assert existing is not None
            return self._again(existing, which, request.max), False
        if originals:
            self.background(lambda: self._run(operation_id, originals, 0))
        else:
            self._finish(operation_id, "done")
        return self.get(operation_id), True

    def get(self, operation_id: str) -> dict[str, Any]:
        row = self._read("operation_id = :id", operation_id) if _OPERATION.match(operation_id) else None
        if row is None:
            raise NotFound(
                f"no re-run operation {operation_id}",
                code="operation_not_found",
                details={"operation_id": operation_id},
            )
        return view(row)

    # -- internals ----------------------------------------------------------------------------------

    def _read(self, where: str, value: str) -> Any:
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            return conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM rerun_operation WHERE {where} AND tenant_id = :t AND organization_id = :o"
                ),
                {"id": value, "t": tenant, "o": org, "stale": STALE_S},
            ).first()

    def _by_key(self, key: str) -> Any:
        return self._read("idempotency_key = :id", key)

    def _again(self, row: Any, which: dict[str, str], max_count: int) -> dict[str, Any]:
        """A retried request: the same operation; resumed when it runs with no progress for a while."""
        if row.filter != which or row.max_count != max_count:
            raise Conflict(
                "this idempotency key started an operation with another filter or max",
                code="idempotency_key_reused",
                details={"operation_id": row.operation_id},
            )
        if row.state == "running" and row.stale and self._claim(row.operation_id, row.updated_at):
            originals = [int(i) for i in row.originals]
            self.background(lambda: self._run(row.operation_id, originals, len(row.results)))
        return view(row)

    def _claim(self, operation_id: str, seen: Any) -> bool:
        """Take over a stale operation: one retry wins (the progress time as the precondition)."""
        with self.engine.begin() as conn:
            moved = conn.execute(
                text("UPDATE rerun_operation SET updated_at = now() WHERE operation_id = :id AND updated_at = :seen"),
                {"id": operation_id, "seen": seen},
            )
        return bool(moved.rowcount)

    def _match(self, which: dict[str, str], max_count: int) -> list[int]:
        filters = parse_filters(which)
        clauses, params = _where(filters)
        tenant, org = self.tenant
        statement = text(
            f"SELECT execution_id FROM execution WHERE {' AND '.join(clauses)} "
            "ORDER BY created_at, execution_id LIMIT :limit"
        )
        with self.engine.connect() as conn:
            ids = [
                r.execution_id
                for r in conn.execute(statement, {**params, "t": tenant, "o": org, "limit": max_count + 1})
            ]
        if len(ids) > max_count:
            raise BadRequest(
                f"more than {max_count} executions match: narrow the filter or raise max (at most {MAX_MAX})",
                code="too_many_executions",
                details={"max": max_count, "matched_at_least": len(ids)},
            )
        return ids

    def _run(self, operation_id: str, originals: list[int], done: int) -> None:
        state = "done"
        try:
            for original in originals[done:]:
                self._progress(operation_id, self._one(operation_id, original))
        except Exception:
            log.exception("bulk re-run failed", extra={"operation_id": operation_id})
            state = "failed"
        self._finish(operation_id, state)

    def _one(self, operation_id: str, original: int) -> dict[str, Any]:
        try:
            started = reruns.rerun(
                self.executions, self.queries, original, dedup_key=f"rerun:{operation_id}:{original}"
            )
        except NoetlError as exc:  # gone meanwhile, still running (re-run by hand and not ended): recorded
            return {"rerun_of": str(original), "status": "error", "code": exc.code}
        return {"rerun_of": str(original), "status": started["status"], "execution_id": started["execution_id"]}

    def _progress(self, operation_id: str, result: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE rerun_operation SET results = results || CAST(:result AS jsonb), updated_at = now() "
                    "WHERE operation_id = :id"
                ),
                {"id": operation_id, "result": json.dumps([result])},
            )

    def _finish(self, operation_id: str, state: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE rerun_operation SET state = :state, finished_at = now(), updated_at = now() "
                    "WHERE operation_id = :id"
                ),
                {"id": operation_id, "state": state},
            )


def _thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="bulk-rerun", daemon=True).start()


def blueprint(service: Callable[[], BulkReruns]) -> Blueprint:
    """``POST /api/executions/reruns`` and ``GET /api/executions/reruns/<operation_id>``."""
    bp = Blueprint("bulk_reruns", __name__)

    @bp.post("/api/executions/reruns")
    def start_reruns() -> tuple[dict[str, Any], int]:
        caller = g.get("caller")
        by = None if caller is None else str(caller.principal)
        record, created = service().start(json_body(BulkRerun), by=by)
        return record, 202 if created else 200

    @bp.get("/api/executions/reruns/<operation_id>")
    def get_reruns(operation_id: str) -> dict[str, Any]:
        return service().get(operation_id)

    return bp
