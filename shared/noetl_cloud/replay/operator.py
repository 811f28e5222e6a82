"""``noetl-cloud replay verify``: live projection rows against a fresh fold, through the API.

Exit 0 when every surface matches; 1 naming each surface that drifts (stderr) with the report
(stdout); ``--wait`` first gives a lagging projector that many seconds to catch up, saying on
``progress`` how far behind it is each time that changes.
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
    progress: Callable[[str], None] | None = None,
) -> int:
    query = urlencode({"tenant_id": tenant_id, "organization_id": organization_id, "execution_id": execution_id})
    deadline = clock() + wait_s
    said = None
    while True:
        report: dict[str, Any] = api.get(f"/api/replay/verify?{query}").raise_for_error().json
        behind = report.get("events_behind", 0)
        if report["ok"] or behind <= 0 or clock() >= deadline:
            break
        if progress is not None and behind != said:
            progress(f"the projection is {behind} events behind; waiting up to {max(deadline - clock(), 0):.0f} s more")
            said = behind
        sleep(0.5)  # the projector is behind: give it time, then compare again
    out(json.dumps(report, indent=2))
    if report["ok"]:
        return 0
    behind = report.get("events_behind", 0)
    lag = f" (the projection is {behind} events behind)" if behind else ""
    err(f"noetl-cloud: replay drift in execution {execution_id}: {', '.join(report['drift'])}{lag}")
    return 1
