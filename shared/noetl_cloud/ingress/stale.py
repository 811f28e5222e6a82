"""A listener directory that keeps serving the last good configuration while the control plane is down.

The store-and-forward spool exists for outages of the control plane, but the ingress learns a
listener's configuration (verifier, spool block) from that same control plane. Without this, a
delivery arriving after the cached configuration expired would be answered 503 however the
subscription spools. The last configuration fetched successfully is therefore kept (per
instance, in memory only: it holds a resolved secret) and served for up to ``max_stale_s`` when
a refresh fails. A listener the control plane reports unknown is forgotten at once.
"""

from __future__ import annotations

import threading
from typing import Any

from noetl_cloud.ingress.listeners import ControlPlaneUnavailable, ListenerDirectory

MAX_STALE_S = 6 * 3600.0
MAX_REMEMBERED = 10_000


class StaleTolerantDirectory(ListenerDirectory):
    def __init__(self, api: Any, *, max_stale_s: float = MAX_STALE_S, **kwargs: Any) -> None:
        super().__init__(api, **kwargs)
        self.max_stale_s = max_stale_s
        self._last_good: dict[str, tuple[float, dict[str, Any]]] = {}
        self._good_lock = threading.Lock()

    def _fetch(self, listener: str) -> dict[str, Any] | None:
        try:
            config = super()._fetch(listener)
        except ControlPlaneUnavailable:
            with self._good_lock:
                good = self._last_good.get(listener)
            if good is not None and self._clock() - good[0] <= self.max_stale_s:
                return good[1]
            raise
        with self._good_lock:
            if config is None:
                self._last_good.pop(listener, None)
            else:
                if len(self._last_good) >= MAX_REMEMBERED:
                    self._last_good.clear()
                self._last_good[listener] = (self._clock(), config)
        return config
