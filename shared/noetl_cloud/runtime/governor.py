"""The runtime's rate governor: ``limits.max_dispatch_per_sec`` as a token bucket (RFC §9, Phase 7).

Over the rate the runtime waits before its next dispatch instead of dispatching; the messages it
holds meanwhile count against ``max_in_flight``, so the source's flow control stops fetching and
the backlog stays in the source (no loss, nothing buffered beyond the cap). The moment limiting
starts is reported once (``on_limited``), and again only after a dispatch went through without
waiting (the limiting episode ended).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from noetl_cloud.ratelimit import TokenBucket

Interruptible = Callable[[float], bool]  # wait up to N seconds; True when woken to stop


class RateGovernor:
    """``per_sec`` dispatches per second (``None``: unlimited), bursts of at most ``burst``."""

    def __init__(
        self,
        per_sec: float | None,
        *,
        on_limited: Callable[[float], None] | None = None,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_sec = per_sec
        self.bucket = TokenBucket(per_sec, burst, clock=clock) if per_sec else None
        self.on_limited = on_limited
        self.limiting = False
        self.episodes = 0
        self._lock = threading.Lock()

    def chunk(self, wanted: int) -> int:
        """How many messages one dispatch may carry: a chunk never exceeds the bucket's burst."""
        if self.bucket is None:
            return wanted
        return max(1, min(wanted, math.floor(self.bucket.burst)))

    def admit(self, n: int, wait: Interruptible) -> bool:
        """Block until ``n`` dispatches are allowed (taking them); ``False`` when ``wait`` was
        interrupted (the runtime is stopping) before that."""
        bucket = self.bucket
        if bucket is None:
            return True
        waited = False
        while not bucket.take(n):
            delay = bucket.wait_time(n)
            with self._lock:
                if not self.limiting:
                    self.limiting = True
                    self.episodes += 1
                    started = True
                else:
                    started = False
            if started and self.on_limited is not None:
                self.on_limited(delay)
            waited = True
            if wait(max(delay, 0.001)):
                return False
        if not waited:
            with self._lock:
                self.limiting = False
        return True
