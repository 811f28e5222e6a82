"""Key-value store in one JSON file: the coordination state of ``noetl-cloud subscribe`` (RFC §8.6,
"a local file in CLI"), so a circuit that opened survives a restart of the command.

Every operation takes an exclusive ``flock`` on ``<file>.lock``, reads the file, and a mutation
writes it back whole (a temporary file, fsynced, renamed over it): atomic for every process on the
machine that shares the file. Sized for a CLI's handful of keys (circuits, backlog marks, leases),
not for a deployment.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

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


class FileKeyValueStore(TransactionalStore):
    """The KV port on one JSON file (created on the first write)."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock = utc_now) -> None:
        super().__init__(clock)
        self.path = Path(path)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_name(self.path.name + ".lock"), "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path} is not a key-value file: {exc}") from None
        return data if isinstance(data, dict) else {}

    def _save(self, records: dict[str, dict[str, Any]]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(records, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    @staticmethod
    def _entry(key: str, record: dict[str, Any]) -> Entry:
        expires = record.get("expires_at")
        return Entry(
            key=key,
            value=decode_value(record["value"]),
            version=int(record["version"]),
            expires_at=None if expires is None else datetime.fromisoformat(expires),
        )

    def _live(self, records: dict[str, dict[str, Any]], key: str, now: datetime) -> Entry | None:
        record = records.get(key)
        if record is None:
            return None
        entry = self._entry(key, record)
        return entry if is_live(entry.expires_at, now) else None

    def get(self, key: str) -> Entry | None:
        check_key(key)
        with self._locked():
            return self._live(self._load(), key, self._now())

    def _mutate(self, key: str, mutation: Mutation) -> tuple[Entry | None, Entry | None]:
        with self._locked():
            records = self._load()
            now = self._now()
            before = self._live(records, key, now)
            change = mutation(before)
            if change is None:
                return before, before
            if isinstance(change, Put):
                version = 1 if before is None else before.version + 1  # as the memory adapter
                expires = expiry(now, change.ttl_s)
                records[key] = {
                    "value": change.value_json,
                    "version": version,
                    "expires_at": None if expires is None else expires.isoformat(),
                }
                self._save(records)
                return before, self._entry(key, records[key])
            records.pop(key, None)
            self._save(records)
            return before, None
