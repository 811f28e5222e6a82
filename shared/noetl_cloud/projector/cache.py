"""The surfaces of recently folded executions, kept in the projector instance between deliveries.

A fold at the tip would otherwise load the surfaces its batch touches from ``projection`` each time.
After a fold commits, its surfaces (those it loaded or wrote) are kept here with the tracking
version and registry digest they are at. The next fold of that execution takes them out (so a
fold that fails never leaves mutated rows behind) and uses them only when the tracking row it
locked has exactly that version and digest: no other instance folded the execution since. Anything
else — a miss, another version — loads from the database as before.

Bounded by the number of surface rows kept (least recently folded executions leave first);
``max_rows = 0`` turns it off.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

Scope = tuple[str, str, str]


@dataclass
class Entry:
    version: int
    digest: str
    kinds: dict[str, dict[str, Any]]  # row kind -> rows by id (the ReplayState's own dicts)
    rows: int = field(init=False)

    def __post_init__(self) -> None:
        self.rows = sum(len(rows) for rows in self.kinds.values())


class SurfaceCache:
    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._entries: OrderedDict[Scope, Entry] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def take(self, scope: Scope, version: int, digest: str) -> dict[str, dict[str, Any]]:
        """The kept surfaces of ``scope`` if they are at ``version`` and ``digest`` (removed from the
        cache either way: the caller puts back what it commits)."""
        with self._lock:
            entry = self._entries.pop(scope, None)
            if entry is not None:
                self._rows -= entry.rows
            if entry is None or entry.version != version or entry.digest != digest:
                self.misses += 1
                return {}
            self.hits += 1
            return entry.kinds

    def put(self, scope: Scope, version: int, digest: str, kinds: dict[str, dict[str, Any]]) -> None:
        """Keep ``kinds`` (committed at ``version``) for the next fold of ``scope``."""
        if self.max_rows <= 0:
            return
        entry = Entry(version, digest, kinds)
        if entry.rows > self.max_rows:
            return
        with self._lock:
            old = self._entries.pop(scope, None)
            if old is not None:
                self._rows -= old.rows
            self._entries[scope] = entry
            self._rows += entry.rows
            while self._rows > self.max_rows and self._entries:
                _scope, evicted = self._entries.popitem(last=False)
                self._rows -= evicted.rows
