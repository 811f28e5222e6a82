"""Token buckets: per-listener rate limits of the ingress and the runtime's dispatch governor.

Pure state machines over an injected monotonic clock, so tests drive time instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` stored; thread-safe."""

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = burst if burst is not None else max(rate, 1.0)
        self._clock = clock
        self._tokens = self.burst
        self._stamp = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens if there are that many; False (and nothing taken) otherwise."""
        with self._lock:
            self._refill()
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are available (0 when they are now)."""
        with self._lock:
            self._refill()
            return max(0.0, (n - self._tokens) / self.rate)

    def retry_after(self, n: float = 1.0) -> int:
        """``wait_time`` rounded up to whole seconds, at least 1 (for a ``Retry-After`` header)."""
        return max(1, math.ceil(self.wait_time(n)))
