"""Listener configuration, fetched from the control plane and cached per instance.

A known listener's configuration is kept for ``ttl_s`` (a rotated secret or a changed route takes
effect within it); an unknown listener is remembered for ``negative_ttl_s`` so a scan of random
paths does not turn into one control-plane call per request. When the control plane cannot be
reached the error is retryable (503): the source redelivers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from noetl_cloud.errors import NoetlError, NotFound, Unavailable
from noetl_cloud.web.client import ApiClient, segment

log = logging.getLogger(__name__)


class UnknownListener(NotFound):
    code = "unknown_listener"


class ControlPlaneUnavailable(Unavailable):
    code = "control_plane_unavailable"


class ListenerDirectory:
    def __init__(
        self,
        api: ApiClient,
        *,
        ttl_s: float = 30.0,
        negative_ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self.negative_ttl_s = negative_ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def get(self, listener: str) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(listener)
        if hit is not None and hit[0] > now:
            if hit[1] is None:
                raise UnknownListener(f"no listener {listener!r}")
            return hit[1]
        config = self._fetch(listener)
        with self._lock:
            if len(self._cache) > 10_000:  # bounded: drop everything rather than grow without end
                self._cache.clear()
            self._cache[listener] = (now + (self.ttl_s if config else self.negative_ttl_s), config)
        if config is None:
            raise UnknownListener(f"no listener {listener!r}")
        return config

    def _fetch(self, listener: str) -> dict[str, Any] | None:
        try:
            response = self.api.get(f"/api/internal/ingress/{segment(listener)}")
        except NoetlError as exc:
            raise ControlPlaneUnavailable("the control plane did not answer; retry later") from exc
        if response.status == 404:
            return None
        if response.status != 200 or not isinstance(response.json, dict):
            # The control plane's reason (a secret the wallet lacks: listener_secret_missing) is the
            # operator's to read; the sender gets the generic 503.
            error = response.json.get("error") if isinstance(response.json, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            log.error("listener %s configuration unavailable: %s %s", listener, response.status, code)
            raise ControlPlaneUnavailable("the listener's configuration is unavailable; retry later")
        return response.json

    def forget(self, listener: str) -> None:
        with self._lock:
            self._cache.pop(listener, None)
