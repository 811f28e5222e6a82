"""Large workloads kept in process, so a report does not read, decode and send them again.

An execution's ``workload`` never changes after it starts (templates render it in an immutable
sandbox), yet every report locked the execution's row with it and the eager hand-off sent it to the
worker again: for a loop over a 10,000-element workload, tens of kilobytes of JSON decoded and encoded
per iteration. The lock statement now names the executions whose workload this process holds
(``known``) and reads ``NULL`` for them; only workloads larger than :data:`MIN_BYTES` are kept, so the
list stays short and the small workloads of ordinary executions cost nothing extra.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

MIN_BYTES = 512  # pg_column_size of the stored workload (after compression); below it, reading it is cheap
MAX_ENTRIES = 64


class WorkloadCache:
    """A bounded, thread-safe LRU of large workloads by execution id."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def known(self) -> list[int]:
        """The execution ids held (the lock statement's ``:known``)."""
        with self._lock:
            return list(self._entries)

    def get(self, execution_id: int) -> dict[str, Any] | None:
        with self._lock:
            workload = self._entries.get(execution_id)
            if workload is not None:
                self._entries.move_to_end(execution_id)
            return workload

    def offer(self, execution_id: int, workload: dict[str, Any], stored_bytes: int) -> None:
        """Keep ``workload`` when it is large enough to be worth it."""
        if stored_bytes < MIN_BYTES:
            return
        with self._lock:
            self._entries[execution_id] = workload
            self._entries.move_to_end(execution_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
