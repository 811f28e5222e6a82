"""The payload store in a dict: unit tests and the embedded local mode."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import IO

from noetl_cloud.payload.port import ObjectPayloadStore, PayloadNotFound


class MemoryPayloadStore(ObjectPayloadStore):
    def __init__(self, *, tenant_id: str = "default", organization_id: str = "default") -> None:
        super().__init__(tenant_id=tenant_id, organization_id=organization_id)
        self.objects: dict[str, tuple[bytes, str, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def _exists(self, key: str) -> bool:
        with self._lock:
            return key in self.objects

    def _upload(self, key: str, file: IO[bytes], size: int, media_type: str, metadata: Mapping[str, str]) -> None:
        data = file.read()
        with self._lock:
            self.objects.setdefault(key, (data, media_type, dict(metadata)))

    def _chunks(self, key: str, chunk_bytes: int) -> Iterator[bytes]:
        with self._lock:
            found = self.objects.get(key)
        if found is None:
            raise PayloadNotFound(f"no payload {key}")
        data = found[0]
        for start in range(0, len(data), chunk_bytes):
            yield data[start : start + chunk_bytes]

    def _delete(self, key: str) -> bool:
        with self._lock:
            return self.objects.pop(key, None) is not None
