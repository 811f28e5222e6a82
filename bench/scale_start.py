"""Step 2 of bench/scale.py: start throughput on the grown database against its twin, back to back.

Each side is a database with its own execute and projector roles. A run is ``n`` single
``POST /api/execute`` from 8 threads into a pool no worker serves, so nothing else runs. Runs alternate
twin, grown, grown, twin, :data:`ROUNDS` times; the figure at a size is the median, over the adjacent
pairs (each side first in half of them), of the grown run's rate over the twin run's: seconds apart, so
a change of the machine's load between pairs does not read as a change with size, and one disturbed
run moves one pair of many.

The projector is out of the timed window. While a run is timed, its side's projector subscription is
switched to pull (``ModifyPushConfig`` with an empty config), so the events the run writes wait in
Pub/Sub; then it is switched back and the projector folds them, untimed, before the next run begins.
With the projector pushed to during the run it took about a third of the two cores, and how much of
its fold landed inside the window moved a side's rate by up to 20 % from run to run (343-502 starts/s
on one side, against 495-598 paused, in the same quick run). The projector's own rate on the grown
database is step 3's figure (fold against write).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from noetl_cloud.local.process import wait_until
from scale_db import scalar, settle, wait_folded
from scale_inprocess import start_cost

ROUNDS = 6  # of twin, grown, grown, twin: twelve runs a side, twelve pairs
IDLE_POOL = "scale-idle"  # a pool with a topic and no worker: started executions stay issued
THREADS = 8


@dataclass(frozen=True)
class Side:
    """One database of step 2: how to start one execution on it, its engine, and its projector's push
    subscription (paused while a run is timed)."""

    name: str
    start: Callable[[], str]
    engine: Engine
    subscriber: Any
    projector: str


@contextmanager
def paused(subscriber: Any, subscription: str) -> Iterator[None]:
    """A push subscription pulled from (nothing pushed, its messages kept) inside, pushed to again after."""
    config = subscriber.get_subscription(subscription=subscription).push_config
    subscriber.modify_push_config(request={"subscription": subscription, "push_config": {}})
    try:
        yield
    finally:
        subscriber.modify_push_config(request={"subscription": subscription, "push_config": config})


def start_rate(side: Side, n: int) -> float:
    """Executions started per second by one run of ``n``. It begins once the relay has published what
    the last run wrote; after it, untimed, the projector folds what it started."""
    wait_until(lambda: scalar(side.engine, "SELECT count(*) FROM outbox") == 0, timeout=60, interval=0.5)
    with paused(side.subscriber, side.projector):
        begin = time.perf_counter()
        with ThreadPoolExecutor(THREADS) as pool:
            ids = list(pool.map(lambda _i: side.start(), range(n)))
        rate = n / (time.perf_counter() - begin)
    wait_folded(side.engine, ids, timeout=120)
    return rate


def back_to_back(grown: Side, twin: Side, n: int) -> dict[str, Any]:
    """Step 2 at one size: every run's rate a side, each side's median, and the median pair ratio."""
    settle(twin.engine)  # as the grown one is after its seeding: vacuumed, analyzed, checkpointed
    runs: dict[str, list[float]] = {"twin": [], "grown": []}
    for first, second in ((twin, grown), (grown, twin)) * ROUNDS:
        for side in (first, second):
            runs[side.name].append(start_rate(side, n))
    pairs = [g / t for g, t in zip(runs["grown"], runs["twin"], strict=True)]
    print(
        "  runs (starts/s): grown "
        + ", ".join(f"{r:.0f}" for r in runs["grown"])
        + "; twin "
        + ", ".join(f"{r:.0f}" for r in runs["twin"])
        + f"; pair ratios {min(pairs):.2f}-{max(pairs):.2f}",
        flush=True,
    )
    return {
        "grown": statistics.median(runs["grown"]),
        "twin": statistics.median(runs["twin"]),
        "ratio": statistics.median(pairs),
    }


def in_process(grown: Side, twin: Side, envs: tuple[dict[str, str], dict[str, str]], n: int) -> float:
    """Step 2's second figure (bench/scale_inprocess.py), both projectors paused meanwhile; then each
    folds what it started, before anything else is measured."""
    with ExitStack() as stack:
        for side in (grown, twin):
            stack.enter_context(paused(side.subscriber, side.projector))
        ratio, started = start_cost(*envs, "bench/three", IDLE_POOL, n)
    for side, ids in zip((grown, twin), started, strict=True):
        wait_folded(side.engine, ids, timeout=120)
    return ratio
