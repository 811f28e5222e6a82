"""The executions read API (a Flask blueprint): list, one execution, its events and their follow mode.

* ``GET /api/executions``: filters ``status`` (comma-separated), ``path``, ``version`` (with ``path``),
  ``subscription`` (the subscription's catalog path), ``pool``, ``parent`` (an execution id), ``since`` /
  ``until`` (ISO 8601 with an offset: ``since <= created_at < until``), ``limit`` (1-500, default 50) and
  ``cursor`` (the ``next_cursor`` of the previous page). Newest first, one statement a page.
* ``GET /api/executions/{id}``: the execution's row (status, token state, error) and its event count.
* ``POST /api/executions/{id}/rerun``: a new execution of the same playbook version with the same input,
  linked by ``meta.rerun_of`` (:mod:`~noetl_cloud.control.reruns`); 409 ``execution_not_ended`` while it runs.
* ``GET /api/executions/{id}/events``: its events in log order; ``after=<event_id>`` starts after one
  already seen; ``wait=<seconds>`` (at most 25) is the follow mode, a long poll that answers as soon as
  new events are appended or the execution ended. The answer's ``next_after`` is the ``after`` of the
  next call; ``ended`` with no ``more`` means nothing follows.

A filter or parameter this API cannot use is 400 in the JSON error model with a stable code
(``unknown_filter``, ``invalid_filter``, ``invalid_cursor``, ``invalid_after``, ``invalid_wait``) and the
parameter named in ``details``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask import Blueprint, request

from noetl_cloud.control import reruns
from noetl_cloud.control.execution_queries import MAX_WAIT_S, ExecutionQueries, parse_filters
from noetl_cloud.control.executions import ExecutionService
from noetl_cloud.errors import BadRequest

_ID = re.compile(r"^[0-9]{1,19}$")
_WAIT = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3})?$")


def _after() -> int | None:
    value = request.args.get("after", "")
    if not value:
        return None
    if not _ID.match(value) or int(value) >= 2**63:
        raise BadRequest("after must be an event id (decimal)", code="invalid_after", details={"parameter": "after"})
    return int(value)


def _wait() -> float:
    value = request.args.get("wait", "")
    if not value:
        return 0.0
    if not _WAIT.match(value) or float(value) > MAX_WAIT_S:
        raise BadRequest(
            f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}",
            code="invalid_wait",
            details={"parameter": "wait"},
        )
    return float(value)


def blueprint(queries: Callable[[], ExecutionQueries], executions: Callable[[], ExecutionService]) -> Blueprint:
    """The routes; ``queries`` and ``executions`` give the services on first use (lazy composition)."""
    bp = Blueprint("executions_api", __name__)

    @bp.get("/api/executions")
    def list_executions() -> dict[str, Any]:
        return queries().page(parse_filters(request.args.to_dict()))

    @bp.get("/api/executions/<int:execution_id>")
    def get_execution(execution_id: int) -> dict[str, Any]:
        return executions().get(execution_id)

    @bp.post("/api/executions/<int:execution_id>/rerun")
    def rerun_execution(execution_id: int) -> tuple[dict[str, Any], int]:
        return reruns.rerun(executions(), queries(), execution_id), 202

    @bp.get("/api/executions/<int:execution_id>/events")
    def execution_events(execution_id: int) -> dict[str, Any]:
        after, wait = _after(), _wait()
        if wait > 0:
            return queries().follow(execution_id, after, wait)
        return queries().events_after(execution_id, after)

    return bp
