"""The threads and clocks of one command run: the heartbeat that extends its claim lease, and the
clock whose retry waits end as soon as the run is stopped."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from typing import Any, Protocol

from noetl_cloud.web.client import UpstreamUnavailable, segment
from noetl_cloud.worker.port import ControlPlaneApi, error_code

log = logging.getLogger(__name__)

_HEARTBEAT_JOIN_S = 2.0


class Beating(Protocol):
    """What a heartbeat uses of the worker service."""

    api: ControlPlaneApi
    worker_id: str

    def heartbeat_interval(self, lease_expires_at: Any) -> float: ...


class Heartbeat:
    """Extends the claim lease from its own thread until stopped; a 409 (or 404) sets ``lost``."""

    def __init__(self, service: Beating, command_id: str, lost: threading.Event, interval: float) -> None:
        self.service = service
        self.command_id = command_id
        self.lost = lost
        self.interval = interval
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        context = contextvars.copy_context()  # the trace and execution id of the delivery
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name=f"heartbeat-{self.command_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop beating. A heartbeat call in flight is not waited out for long: the report matters more,
        and a late heartbeat of a reported command is only refused."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=_HEARTBEAT_JOIN_S)

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            if not self.beat():
                return

    def beat(self) -> bool:
        """One heartbeat; false when the lease is gone for good."""
        path = f"/api/commands/{segment(self.command_id)}/heartbeat"
        try:
            response = self.service.api.post(path, {"worker_id": self.service.worker_id})
        except UpstreamUnavailable:
            log.warning("heartbeat failed: the control plane is unreachable", extra={"command_id": self.command_id})
            return True
        if response.ok:
            lease = response.json.get("lease_expires_at") if isinstance(response.json, dict) else None
            self.interval = self.service.heartbeat_interval(lease)
            return True
        if response.status in (404, 409):
            log.info("heartbeat refused: stopping", extra={"command_id": self.command_id, "code": error_code(response)})
            self.lost.set()
            return False
        log.warning("heartbeat failed", extra={"command_id": self.command_id, "http_status": response.status})
        return True


class StoppableClock:
    """The real clock, whose waits (between retries) end as soon as the run is stopped."""

    def __init__(self, stopped: threading.Event) -> None:
        self._stopped = stopped

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopped.wait(seconds)
