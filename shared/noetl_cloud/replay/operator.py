"""``noetl-cloud replay verify``: live projection rows against a fresh fold, through the API.

Exit 0 when every surface matches; 1 naming each surface that drifts (stderr) with the report
(stdout); ``--wait`` first gives a lagging projector that many seconds to catch up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from noetl_cloud.web.client import ApiClient


def verify(
    api: ApiClient,
    *,
    tenant_id: str,
    organization_id: str,
    execution_id: str,
    wait_s: float = 0.0,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    query = urlencode({"tenant_id": tenant_id, "organization_id": organization_id, "execution_id": execution_id})
    deadline = clock() + wait_s
    while True:
        report: dict[str, Any] = api.get(f"/api/replay/verify?{query}").raise_for_error().json
        if report["ok"] or report.get("events_behind", 0) <= 0 or clock() >= deadline:
            break
        sleep(0.5)  # the projector is behind: give it time, then compare again
    out(json.dumps(report, indent=2))
    if report["ok"]:
        return 0
    behind = report.get("events_behind", 0)
    lag = f" (the projection is {behind} events behind)" if behind else ""
    err(f"noetl-cloud: replay drift in execution {execution_id}: {', '.join(report['drift'])}{lag}")
    return 1
