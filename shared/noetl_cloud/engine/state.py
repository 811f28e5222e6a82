"""Execution state: ``ctx`` (§3.2) with its patches, and the write-once guard of parallel loops (§6.6)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from noetl_cloud.errors import Conflict


class CtxConflict(Conflict):
    """Two iterations of a parallel loop wrote different values to one ``ctx`` key."""

    code = "ctx_conflict"


class CtxStore:
    """The mutable ``ctx`` of one execution. Every change is returned as a JSON-Patch list (RFC 6902 ops).

    Inside a parallel loop the store is *guarded*: each key may be written by one iteration only; a second
    iteration writing a different value raises :class:`CtxConflict` (an equal value is not a conflict).

    Iterations of a parallel loop run on threads: :attr:`lock` makes a check and the write that follows it one
    step (hold it across both), and a write replaces :attr:`data` with a new mapping rather than changing the
    one a template may be reading.
    """

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = copy.deepcopy(dict(initial or {}))
        self._owners: dict[str, str] | None = None
        self.lock = threading.RLock()

    def guard(self) -> None:
        """Start write-once checking (a parallel loop begins)."""
        self._owners = {}

    def unguard(self) -> None:
        """Stop write-once checking (the parallel loop ended)."""
        self._owners = None

    def check(self, values: Mapping[str, Any], *, writer: str | None = None) -> None:
        """Raise :class:`CtxConflict` if writing ``values`` as ``writer`` would conflict; write nothing."""
        if self._owners is not None and writer is not None:
            for key, value in values.items():
                owner = self._owners.get(key)
                if owner is not None and owner != writer and self.data.get(key) != value:
                    raise CtxConflict(
                        f"set_ctx conflict on key '{key}': already written by {owner} in this parallel loop",
                        details={"key": key, "owner": owner, "writer": writer},
                    )

    def apply(self, values: Mapping[str, Any], *, writer: str | None = None) -> list[dict[str, Any]]:
        """Write ``values`` and return the patch; nothing is written if any key conflicts."""
        with self.lock:
            self.check(values, writer=writer)
            data = dict(self.data)
            patch: list[dict[str, Any]] = []
            for key, value in values.items():
                if key in data and data[key] == value:
                    continue
                op = "replace" if key in data else "add"
                data[key] = copy.deepcopy(value)
                patch.append({"op": op, "path": "/" + _escape(key), "value": value})
                if self._owners is not None and writer is not None:
                    self._owners.setdefault(key, writer)
            self.data = data
            return patch

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the current values."""
        return copy.deepcopy(self.data)


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
