"""The coordination key-value port: small documents with versions, expiry and leases.

Coordination state that every instance must share and that must survive restarts lives here
(ARCHITECTURE §3): circuit breakers (a state document updated by compare-and-set), drain leases
per (subscription, lane), runtime singleton leases and token buckets.

Semantics every adapter keeps (``tests/contracts/kv.py`` proves them):

* A key is any non-empty string; namespaces are the caller's (``circuit/<downstream>``,
  ``spool/backlog/<subscription>``). A value is a JSON object (``dict`` with string keys); it is stored
  as JSON, so what comes back is what ``json.loads(json.dumps(value))`` gives, and a fresh copy
  on every read.
* ``version`` is 1 for a new entry and grows by one with every successful write of it.
* An entry whose ``expires_at`` has passed behaves as absent everywhere: ``get`` does not return
  it, ``create`` and ``compare_and_set(expected_version=None)`` replace it (the new entry starts
  again at version 1), a compare-and-set naming its old version fails, ``delete`` reports
  nothing deleted. Versions therefore order the writes within one life of an entry only; a value
  that must be told apart across lives should carry its own token (as a lease carries its holder).
* Every write sets the expiry from its own ``ttl_s`` (``None``: never expires); a write does not
  inherit the previous expiry.
* Time comes from the adapter's injected clock; instances sharing a store should run on
  synchronised clocks (Cloud Run's are), expiry is only as exact as they are.

Leases are entries under ``lease/<name>`` whose value is ``{"holder": <holder>}``.

:class:`TransactionalStore` implements the operations once, over one primitive an adapter
provides: apply a mutation to one key atomically (under a lock, in a Firestore transaction).
The decisions are pure functions of the live entry, so an adapter may run them again when its
transaction retries.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, runtime_checkable

from noetl_cloud.errors import Conflict, NoetlError, PayloadTooLarge

Clock = Callable[[], datetime]

LEASE_PREFIX: Final = "lease/"
# Firestore's document limit is 1 MiB; coordination state is far smaller than this.
MAX_VALUE_BYTES: Final = 900 * 1024


@dataclass(frozen=True)
class Entry:
    """One live entry as read or written."""

    key: str
    value: dict[str, Any]  # JSON-like; a fresh copy, changing it changes nothing stored
    version: int  # 1 for a new entry, +1 per successful write
    expires_at: datetime | None  # UTC; None: never expires


@dataclass(frozen=True)
class Lease:
    """A lease held by ``holder`` until ``expires_at`` (UTC); ``version`` grows with every renewal."""

    name: str
    holder: str
    expires_at: datetime
    version: int


class VersionConflict(Conflict):
    """The entry was not at the version the writer expected (``None``: absent or expired)."""

    code = "kv_version_conflict"

    def __init__(self, key: str, expected: int | None, actual: int | None) -> None:
        def said(version: int | None) -> str:
            return "absent" if version is None else f"at version {version}"

        super().__init__(
            f"entry {key!r} is {said(actual)}, not {said(expected)}",
            details={"key": key, "expected_version": expected, "actual_version": actual},
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class KeyValueStoreError(NoetlError):
    """The store refused an operation for a reason retrying will not fix (permissions, limits, corruption).

    An outage is :class:`~noetl_cloud.errors.Unavailable` instead (retryable).
    """

    code = "kv_store_error"


class ValueTooLarge(PayloadTooLarge):
    """A value does not fit in one coordination document."""

    code = "kv_value_too_large"


@runtime_checkable
class KeyValueStore(Protocol):
    """Shared coordination state: versioned JSON documents with optional expiry, and leases."""

    def get(self, key: str) -> Entry | None:
        """The live entry of ``key``, or ``None`` when it is absent or expired."""
        ...

    def get_many(self, keys: Sequence[str]) -> dict[str, Entry | None]:
        """The live entry (or ``None``) of each of ``keys``, read together: one round trip where the
        store can (Firestore's batch get), so a hot path that needs two documents waits for one."""
        ...

    def create(self, key: str, value: dict[str, Any], *, ttl_s: float | None = None) -> Entry | None:
        """Create-if-absent (or if expired): the new entry at version 1, or ``None`` when a live entry exists."""
        ...

    def compare_and_set(
        self, key: str, value: dict[str, Any], *, expected_version: int | None, ttl_s: float | None = None
    ) -> Entry:
        """Write ``value`` if the live entry is at ``expected_version`` (``None``: absent or expired).

        Returns the written entry (version + 1, or 1 for a new one). Raises :class:`VersionConflict`
        carrying the actual version (``None`` when absent) otherwise; nothing is written then.
        """
        ...

    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete the live entry; ``False`` when there was none.

        With ``expected_version``, a live entry at another version is kept and
        :class:`VersionConflict` is raised.
        """
        ...

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        """Take or renew a lease for ``ttl_s`` seconds from now.

        Granted when the lease is free, expired, or already held by ``holder`` (a renewal extends
        it); ``None`` while another holder's lease is live.
        """
        ...

    def release_lease(self, name: str, holder: str) -> bool:
        """Free a lease ``holder`` holds; ``False`` (and nothing changed) when it holds none."""
        ...


# -- the rules every adapter applies ------------------------------------------------------------


@dataclass(frozen=True)
class Put:
    """Mutation result: write this value (the adapter assigns the version)."""

    value_json: str
    ttl_s: float | None


class Remove:
    """Mutation result: delete the entry."""


REMOVE: Final = Remove()

# A mutation sees the live entry (``None``: absent or expired) and says what to do: ``Put``,
# ``REMOVE``, or ``None`` to leave it as it is. It may raise to abort without writing.
Mutation = Callable[[Entry | None], Put | Remove | None]


def check_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError("a key must be a non-empty string")
    return key


def check_ttl(ttl_s: float | None, *, required: bool = False) -> float | None:
    if ttl_s is None and not required:
        return None
    if ttl_s is None or isinstance(ttl_s, bool) or not math.isfinite(ttl_s) or ttl_s <= 0:
        raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s!r}")
    return float(ttl_s)


def encode_value(key: str, value: dict[str, Any]) -> str:
    """The stored form of a value: compact JSON. Refuses what JSON cannot hold or what is too big."""
    if not isinstance(value, dict):
        raise TypeError(f"a value must be a dict, not {type(value).__name__}")
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    size = len(text.encode())
    if size > MAX_VALUE_BYTES:
        raise ValueTooLarge(
            f"value of {key!r} is {size} bytes; at most {MAX_VALUE_BYTES} fit",
            details={"key": key, "bytes": size, "max_bytes": MAX_VALUE_BYTES},
        )
    return text


def decode_value(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError("a stored value is not a JSON object")
    return value


def expiry(now: datetime, ttl_s: float | None) -> datetime | None:
    return None if ttl_s is None else now + timedelta(seconds=ttl_s)


def is_live(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is None or now < expires_at


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (a naive one is refused: its zone is unknown)."""
    if moment.tzinfo is None:
        raise ValueError("the clock must return timezone-aware datetimes")
    return moment.astimezone(UTC)


def lease_key(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("a lease name must be a non-empty string")
    return LEASE_PREFIX + name


def lease_of(name: str, entry: Entry | None) -> Lease | None:
    if entry is None or entry.expires_at is None:
        return None
    return Lease(name=name, holder=str(entry.value.get("holder")), expires_at=entry.expires_at, version=entry.version)


class TransactionalStore(ABC):
    """The port's write operations, over an adapter's atomic single-key mutation."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def _now(self) -> datetime:
        return utc(self._clock())

    @abstractmethod
    def _mutate(self, key: str, mutation: Mutation) -> tuple[Entry | None, Entry | None]:
        """Apply ``mutation`` to ``key`` atomically; return the live entry before and after.

        The adapter reads the entry, passes it to ``mutation`` when live (``None`` otherwise),
        and applies the answer: a ``Put`` is written at the live version + 1 (1 when there was
        no live entry) with its expiry counted from now; ``REMOVE`` deletes; ``None`` keeps the
        entry (an expired one may be deleted then). Exceptions from ``mutation`` propagate and
        nothing is written.
        """

    @abstractmethod
    def get(self, key: str) -> Entry | None:
        """See :meth:`KeyValueStore.get`."""

    def get_many(self, keys: Sequence[str]) -> dict[str, Entry | None]:
        """See :meth:`KeyValueStore.get_many` (here one read after another)."""
        return {key: self.get(key) for key in keys}

    def create(self, key: str, value: dict[str, Any], *, ttl_s: float | None = None) -> Entry | None:
        put = Put(encode_value(check_key(key), value), check_ttl(ttl_s))
        before, after = self._mutate(key, lambda live: None if live is not None else put)
        return after if before is None else None

    def compare_and_set(
        self, key: str, value: dict[str, Any], *, expected_version: int | None, ttl_s: float | None = None
    ) -> Entry:
        put = Put(encode_value(check_key(key), value), check_ttl(ttl_s))

        def mutation(live: Entry | None) -> Put:
            actual = None if live is None else live.version
            if actual != expected_version:
                raise VersionConflict(key, expected_version, actual)
            return put

        _before, after = self._mutate(key, mutation)
        assert after is not None
        return after

    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        check_key(key)

        def mutation(live: Entry | None) -> Remove | None:
            if live is None:
                return None
            if expected_version is not None and live.version != expected_version:
                raise VersionConflict(key, expected_version, live.version)
            return REMOVE

        before, _after = self._mutate(key, mutation)
        return before is not None

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        key = lease_key(name)
        if not isinstance(holder, str) or not holder:
            raise ValueError("a lease holder must be a non-empty string")
        put = Put(encode_value(key, {"holder": holder}), check_ttl(ttl_s, required=True))

        def mutation(live: Entry | None) -> Put | None:
            return put if live is None or live.value.get("holder") == holder else None

        _before, after = self._mutate(key, mutation)
        return lease_of(name, after) if after is not None and after.value.get("holder") == holder else None

    def release_lease(self, name: str, holder: str) -> bool:
        key = lease_key(name)

        def mutation(live: Entry | None) -> Remove | None:
            return REMOVE if live is not None and live.value.get("holder") == holder else None

        before, _after = self._mutate(key, mutation)
        return before is not None and before.value.get("holder") == holder
