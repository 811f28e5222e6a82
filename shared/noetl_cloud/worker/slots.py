"""Slots: the threads of a worker process that run commands a report handed over beyond the first.

A report with ``accept_next`` asks for ``1 + free slots`` commands (``next_slots``). The delivery's own
thread runs the first; each further one runs on a slot thread, which follows that command's own
sequential chain and then frees its slot. The delivery waits for the slots it filled before it
answers Pub/Sub, so no work outlives the request that carried it (on Cloud Run, an instance whose CPU
is allocated only during requests would otherwise freeze it). The count is per process: gunicorn's
threads share one pool of slots, and a fork starts with a fresh one.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class Slots:
    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError("the number of slots must be >= 0")
        self.size = size
        self._free = size
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0

    def reserve(self) -> int:
        """Take every free slot; the number taken (give back what goes unused with :meth:`release`)."""
        with self._lock:
            self._fresh_after_fork()
            taken, self._free = self._free, 0
            return taken

    def release(self, count: int) -> None:
        if count:
            with self._lock:
                self._free += count

    def run(self, work: Callable[[], None]) -> Future[None]:
        """Run ``work`` on a reserved slot (in the caller's context: its trace), freeing the slot after."""

        def on_slot() -> None:
            try:
                context.run(work)
            finally:
                self.release(1)

        context = contextvars.copy_context()
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=max(1, self.size), thread_name_prefix="eager-slot")
            executor = self._executor
        return executor.submit(on_slot)

    @property
    def free(self) -> int:
        with self._lock:
            return self._free

    def _fresh_after_fork(self) -> None:
        # Threads do not survive fork: a forked gunicorn worker starts with every slot free.
        if self._pid != os.getpid():
            self._pid, self._free, self._executor = os.getpid(), self.size, None
