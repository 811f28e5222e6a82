"""Keeping a frame's lease while a cursor slot runs it (docs/frames.md).

The slot heartbeats a frame once before it starts the frame's work (``CLAIMED → RUNNING``:
``frame.started``); from then on a :class:`FrameBeat` heartbeats it from its own thread every
``heartbeat_seconds`` (at most a third of the lease) until the frame is committed. A heartbeat answered
409/404 means the lease is gone: ``lost`` is set, and the slot drops the frame before its next task
attempt, uncommitted. A frames API that does not answer costs a heartbeat, not the frame;
:meth:`FrameBeat.holds_until` says how long the lease the last accepted heartbeat extended still holds.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time

from noetl_cloud.web.client import UpstreamUnavailable, segment
from noetl_cloud.worker.port import ControlPlaneApi, error_code

log = logging.getLogger(__name__)

_JOIN_S = 2.0


class FrameBeat:
    """Heartbeats one frame from its own thread until stopped; a refused heartbeat sets ``lost``."""

    def __init__(
        self,
        frames: ControlPlaneApi,
        worker_id: str,
        frame_id: str,
        lease: float,
        interval: float,
        lost: threading.Event,
    ) -> None:
        self.frames = frames
        self.worker_id = worker_id
        self.frame_id = frame_id
        self.lease = lease
        self.interval = interval
        self.lost = lost
        self._held_at = time.monotonic()  # the first heartbeat (before the beat starts) extended the lease
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name=f"frame-{self.frame_id}", daemon=True
        )
        self._thread.start()

    def holds_until(self) -> float:
        """When (monotonic) the lease the last accepted heartbeat extended runs out, less one interval."""
        return self._held_at + self.lease - self.interval

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_S)

    def _run(self) -> None:
        path = f"/api/frames/{segment(self.frame_id)}/heartbeat"
        while not self._done.wait(self.interval):
            try:
                response = self.frames.post(path, {"worker_id": self.worker_id, "lease_seconds": self.lease})
            except UpstreamUnavailable:
                log.warning("frame heartbeat failed: the frames API is unreachable", extra={"frame_id": self.frame_id})
                continue
            if response.status in (404, 409):
                log.info("frame lease lost", extra={"frame_id": self.frame_id, "code": error_code(response)})
                self.lost.set()
                return
            if response.ok:
                self._held_at = time.monotonic()
