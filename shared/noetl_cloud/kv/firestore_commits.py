"""Single-commit writes of the Firestore key-value store, for the two writes of the ingress's replay
claim (a mixin of :class:`~noetl_cloud.kv.firestore.FirestoreKeyValueStore`).

A write through a transaction costs three RPCs (begin, read, commit): two milliseconds of client CPU
on the emulator, where one commit costs 0.6. Two writes have a precondition Firestore checks itself:

* :meth:`create` of a key with no document at all: ``DocumentReference.create`` (the ``exists:
  false`` precondition). A document already there, live or expired, takes the transaction, which
  replaces an expired one;
* :meth:`compare_and_set` of an entry this process itself wrote last, still live, at the version it
  wrote: ``update`` conditioned on the document's update time as that write left it. Any other
  case, or a refused precondition, takes the transaction.

Neither is retried by the library: a commit whose answer was lost is an outage to the caller (as a
transaction's is), never a retry that would find its own first write. A commit aborted because a
transaction held the document is not applied; the transaction path then decides, with its retries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from noetl_cloud.kv.port import Entry, Put, check_key, check_ttl, decode_value, encode_value, expiry, is_live

#: The update times of this process's own last writes kept, per key (the oldest forgotten first).
KEPT_WRITES = 4096


class SingleCommitWrites:
    """``create`` and ``compare_and_set`` in one commit where Firestore can check the precondition."""

    timeout_s: float

    if TYPE_CHECKING:  # the store's

        def _ref(self, key: str) -> Any: ...
        def _now(self) -> datetime: ...
        def _translated(self) -> AbstractContextManager[None]: ...
        def _firestore(self) -> Any: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writes_lock = threading.Lock()
        self._writes: OrderedDict[str, tuple[int, Any, datetime | None]] = OrderedDict()

    def create(self, key: str, value: dict[str, Any], *, ttl_s: float | None = None) -> Entry | None:
        put = Put(encode_value(check_key(key), value), check_ttl(ttl_s))
        entry = self._commit(key, put, 1, None)
        if entry is not None:
            return entry
        return super().create(key, value, ttl_s=ttl_s)  # type: ignore[misc, no-any-return]

    def compare_and_set(
        self, key: str, value: dict[str, Any], *, expected_version: int | None, ttl_s: float | None = None
    ) -> Entry:
        put = Put(encode_value(check_key(key), value), check_ttl(ttl_s))
        with self._writes_lock:
            known = self._writes.pop(key, None)
        if known is not None and expected_version == known[0] and is_live(known[2], self._now()):
            entry = self._commit(key, put, known[0] + 1, known[1])
            if entry is not None:
                return entry
        return super().compare_and_set(  # type: ignore[misc, no-any-return]
            key, value, expected_version=expected_version, ttl_s=ttl_s
        )

    def _commit(self, key: str, put: Put, version: int, update_time: Any) -> Entry | None:
        """Write ``put`` at ``version`` in one commit: a new document (``update_time`` None) or over the one
        last written at ``update_time``; ``None`` when Firestore refused the precondition."""
        now = self._now()
        entry = Entry(key=key, value=decode_value(put.value_json), version=version, expires_at=expiry(now, put.ttl_s))
        document = {
            "key": key,
            "value_json": put.value_json,
            "version": version,
            "expires_at": entry.expires_at,
            "updated_at": now,
        }
        ref = self._ref(key)
        with self._translated():
            try:
                if update_time is None:
                    written = ref.create(document, retry=None, timeout=self.timeout_s)
                else:
                    option = self._firestore().write_option(last_update_time=update_time)
                    written = ref.update(document, option=option, retry=None, timeout=self.timeout_s)
            except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound, gexc.Aborted):
                return None  # refused, or in a transaction's way (not applied): the transaction decides
        with self._writes_lock:
            self._writes[key] = (version, written.update_time, entry.expires_at)
            while len(self._writes) > KEPT_WRITES:
                self._writes.popitem(last=False)
        return entry
