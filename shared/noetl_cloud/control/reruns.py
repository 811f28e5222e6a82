"""Re-running an execution that ended: a new execution of the same playbook version with the same input.

The new execution is started through :meth:`~noetl_cloud.control.executions.ExecutionService.start_one`
like any other (one transaction, its own id and events). It runs the catalog entry the old one ran
(``catalog_id``: the same version, even when a newer one was registered since), with the workload its
request carried (``playbook.started``'s ``workload``: the input, not the merge with the playbook's
defaults), on its pool, under its parent, and with its ``meta`` plus ``rerun_of``: the old execution's
id, which links the two (``GET /api/executions/{new}`` shows it; the old one is unchanged).
"""

from __future__ import annotations

from typing import Any

from noetl_cloud.control.execution_queries import ENDED, ExecutionQueries
from noetl_cloud.control.executions import ExecutionService
from noetl_cloud.control.models import MAX_DEDUP_WINDOW_S, DedupIn, ExecuteRequest
from noetl_cloud.errors import Conflict


def rerun(
    executions: ExecutionService, queries: ExecutionQueries, execution_id: int, *, dedup_key: str | None = None
) -> dict[str, Any]:
    """Start a new execution with the input of ``execution_id`` (which must have ended); its start answer.

    ``dedup_key`` (a bulk re-run's, :mod:`~noetl_cloud.control.bulk_reruns`) makes a second call with the
    same key within a week answer ``duplicate`` with the execution the first started, instead of a new one.
    """
    old = executions.get(execution_id)  # 404 execution_not_found for none or another tenant's
    if old["status"] not in ENDED:
        raise Conflict(
            f"execution {execution_id} is still {old['status']}: only an execution that ended is re-run",
            code="execution_not_ended",
            details={"status": old["status"]},
        )
    first = queries.events_after(execution_id, None, limit=1)["events"]
    started = first[0]["payload"] if first and first[0]["event_type"] == "playbook.started" else {}
    meta = {**(old["meta"] or {}), "rerun_of": str(execution_id)}
    by_catalog = old["catalog_id"] is not None
    request = ExecuteRequest(
        catalog_id=old["catalog_id"],
        path=None if by_catalog else old["path"],
        version=None if by_catalog else old["version"],
        workload=started.get("workload") or {},
        execution_pool=old["execution_pool"],
        parent_execution_id=old["parent_execution_id"],
        meta=meta,
        dedup=DedupIn(key=dedup_key, window_secs=MAX_DEDUP_WINDOW_S) if dedup_key else None,
    )
    result = executions.start_one(request)
    return {
        "execution_id": result.execution_id,
        "status": result.status,
        "execution_pool": result.execution_pool,
        "rerun_of": str(execution_id),
    }
