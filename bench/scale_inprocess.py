"""Step 2's second figure (bench/scale.py): what one start costs the control plane, in this process,
on the grown database and on its twin, alternating start by start.

The throughput ratio of step 2 goes through HTTP, two gunicorn roles a side and the projectors, on two
shared cores: it moves by 10-20 % between runs whatever the sizes. This one takes the same control
plane code (``Executions.start_one``: the catalog cache, the one write statement, the publish of its
outbox rows to the emulator, as the execute role does) on one thread, alternating grown and twin so a
change of the machine's load falls on both alike; the ratio of the medians is what a start costs more
on the grown database. The executions it starts are published like the role's; bench/scale_start.py
pauses both projectors meanwhile (folding beside the measure, they moved it by 5-7 %) and has them
fold these starts afterwards.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.models import ExecuteRequest
from noetl_cloud.settings import Settings

WARM = 30  # starts a side before the timed ones: connections, prepared statements, the catalog cache


def start_cost(
    grown_env: Mapping[str, str], twin_env: Mapping[str, str], path: str, pool: str, n: int
) -> tuple[float, list[list[str]]]:
    """The median time of a start on the twin over the same on the grown database (``n`` each), and the
    ids of the executions started on each (grown, twin)."""
    request = ExecuteRequest.model_validate({"path": path, "execution_pool": pool})
    planes = [ControlPlane(Settings.from_env({**env, "NOETL_ROLE": "execute"})) for env in (grown_env, twin_env)]
    times: list[list[float]] = [[], []]
    started: list[list[str]] = [[], []]
    try:
        for side, plane in enumerate(planes):
            for _ in range(WARM):
                started[side].append(str(plane.executions.start_one(request).execution_id))
        for i in range(n):
            for side in (0, 1) if i % 2 else (1, 0):  # each side first in half of the pairs
                begin = time.perf_counter()
                result = planes[side].executions.start_one(request)
                times[side].append(time.perf_counter() - begin)
                started[side].append(str(result.execution_id))
    finally:
        for plane in planes:
            plane.relay.close()
            plane.engine.dispose()
    grown, twin = (statistics.median(t) for t in times)
    print(
        f"  in process, one thread, {n} starts a side alternating: median {grown * 1000:.3f} ms a start on the "
        f"grown database, {twin * 1000:.3f} ms on the twin: ratio {twin / grown:.2f}",
        flush=True,
    )
    return twin / grown, started
