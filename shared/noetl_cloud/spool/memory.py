"""In-memory spool backend: unit tests and the embedded local mode."""

from __future__ import annotations

import threading
from itertools import count

from noetl_cloud.spool.item import SpoolItemExists, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.port import ObjectSpool


class InMemorySpool(ObjectSpool):
    """Thread-safe; every operation runs under one lock. Versions are a counter of writes."""

    def __init__(self) -> None:
        self._objects: dict[str, tuple[str, bytes]] = {}
        self._versions = count(1)
        self._lock = threading.Lock()

    def _ref(self, name: str) -> SpoolRef:
        version, data = self._objects[name]
        return SpoolRef(name=name, version=version, size=len(data))

    def _create(self, name: str, data: bytes) -> SpoolRef:
        with self._lock:
            if name in self._objects:
                raise SpoolItemExists(name)
            self._objects[name] = (str(next(self._versions)), bytes(data))
            return self._ref(name)

    def _replace(self, ref: SpoolRef, data: bytes) -> SpoolRef:
        with self._lock:
            stored = self._objects.get(ref.name)
            if stored is None:
                raise SpoolItemNotFound(ref.name)
            if ref.version is not None and stored[0] != ref.version:
                raise SpoolVersionConflict(ref.name, ref.version, stored[0])
            self._objects[ref.name] = (str(next(self._versions)), bytes(data))
            return self._ref(ref.name)

    def _read(self, name: str) -> tuple[SpoolRef, bytes]:
        with self._lock:
            if name not in self._objects:
                raise SpoolItemNotFound(name)
            return self._ref(name), self._objects[name][1]

    def _list(self, prefix: str, limit: int | None) -> list[SpoolRef]:
        with self._lock:
            names = sorted(name for name in self._objects if name.startswith(prefix))
            return [self._ref(name) for name in names[:limit]]

    def _children(self, prefix: str) -> list[str]:
        with self._lock:
            below = {name[len(prefix) :] for name in self._objects if name.startswith(prefix)}
        return sorted({rest.split("/", 1)[0] for rest in below if "/" in rest})

    def _delete(self, ref: SpoolRef) -> bool:
        with self._lock:
            stored = self._objects.get(ref.name)
            if stored is None:
                return False
            if ref.version is not None and stored[0] != ref.version:
                raise SpoolVersionConflict(ref.name, ref.version, stored[0])
            del self._objects[ref.name]
            return True
