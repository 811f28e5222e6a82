"""Sampling of rejection audit events, so a flood of bad requests cannot flood the event log.

At most one ``subscription.message.rejected`` event per (listener, reason) per window; the event
carries how many rejections the window suppressed since the last one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class AuditSampler:
    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def admit(self, listener: str, reason: str) -> int | None:
        """The number of suppressed rejections to report if this one is to be written, else None."""
        key = (listener, reason)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.window_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return None
            if len(self._last) > 10_000:
                self._last.clear()
                self._suppressed.clear()
            self._last[key] = now
            return self._suppressed.pop(key, 0)
