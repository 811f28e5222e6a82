"""In-memory key-value store: unit tests and the embedded local mode."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from noetl_cloud.envelope import utc_now
from noetl_cloud.kv.port import (
    Clock,
    Entry,
    Mutation,
    Put,
    TransactionalStore,
    check_key,
    decode_value,
    expiry,
    is_live,
)


@dataclass(frozen=True)
class _Record:
    value_json: str
    version: int
    expires_at: datetime | None

    def entry(self, key: str) -> Entry:
        return Entry(key=key, value=decode_value(self.value_json), version=self.version, expires_at=self.expires_at)


class InMemoryKeyValueStore(TransactionalStore):
    """Thread-safe; every operation runs under one lock. Expired records are dropped when touched."""

    def __init__(self, *, clock: Clock = utc_now) -> None:
        super().__init__(clock)
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def _live(self, key: str, now: datetime) -> _Record | None:
        record = self._records.get(key)
        if record is not None and not is_live(record.expires_at, now):
            del self._records[key]
            return None
        return record

    def get(self, key: str) -> Entry | None:
        check_key(key)
        with self._lock:
            record = self._live(key, self._now())
            return None if record is None else record.entry(key)

    def _mutate(self, key: str, mutation: Mutation) -> tuple[Entry | None, Entry | None]:
        with self._lock:
            now = self._now()
            record = self._live(key, now)
            before = None if record is None else record.entry(key)
            change = mutation(before)
            if change is None:
                return before, before
            if isinstance(change, Put):
                written = _Record(
                    value_json=change.value_json,
                    version=1 if record is None else record.version + 1,
                    expires_at=expiry(now, change.ttl_s),
                )
                self._records[key] = written
                return before, written.entry(key)
            self._records.pop(key, None)
            return before, None

    def __len__(self) -> int:
        """How many records are held, expired ones not yet dropped included."""
        with self._lock:
            return len(self._records)
