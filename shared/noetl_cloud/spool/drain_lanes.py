"""A drain's hold on a subscription's lanes (RFC §8.3): lane leases, the lane's head, settling replayed items.

* A drainer drains a lane only under its lease ``spool-drain/<subscription>/<lane>`` in the coordination
  store (:class:`LaneLeases`), so two drainers never drain one lane. The lease is renewed once a third of
  its TTL has passed (one store write per item otherwise); a renewal that fails means another drainer owns
  the lane now.
* :func:`load_lane` reads a lane's head: up to ``limit`` items in receive order, with their payloads (an
  item deleted meanwhile is skipped).
* :func:`settle` writes the ``replayed`` events of the items replayed so far in one call, then deletes their
  objects: a drainer killed in between replays them again and the control plane's dedup window answers
  ``duplicate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.item import SpoolItem, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.port import SpoolBackend

LEASE_PREFIX: Final = "spool-drain/"
#: Replayed items whose ``replayed`` events are written in one call, then their objects deleted.
SETTLE_EVERY: Final = 20


@dataclass(frozen=True)
class Loaded:
    """One item of a lane's head: its reference, its record and its payload."""

    ref: SpoolRef
    item: SpoolItem
    payload: bytes

    @property
    def recv_seq(self) -> int:
        return self.item.recv_seq

    @property
    def attempts(self) -> int:
        return self.item.attempts


def lease_name(subscription: str, lane: str) -> str:
    return f"{LEASE_PREFIX}{subscription}/{lane}"


class LaneLeases:
    """The lane leases one drainer takes, renews and releases (each run under its own holder)."""

    def __init__(self, kv: KeyValueStore, ttl_s: float, monotonic: Callable[[], float]) -> None:
        self.kv = kv
        self.ttl_s = ttl_s
        self.monotonic = monotonic
        self._leased_at: dict[tuple[str, str], float] = {}

    def take(self, sub: str, lane: str, holder: str) -> bool:
        taken = self.kv.acquire_lease(lease_name(sub, lane), holder, self.ttl_s) is not None
        if taken:
            self._leased_at[(holder, lane)] = self.monotonic()
        return taken

    def renew(self, sub: str, lane: str, holder: str) -> bool:
        """Renew the lane's lease once a third of its TTL has passed (one store write per item otherwise)."""
        at = self._leased_at.get((holder, lane))
        if at is not None and self.monotonic() - at < self.ttl_s / 3:
            return True
        return self.take(sub, lane, holder)

    def release(self, sub: str, lane: str, holder: str) -> None:
        self.kv.release_lease(lease_name(sub, lane), holder)
        self._leased_at.pop((holder, lane), None)


def load_lane(backend: SpoolBackend, sub: str, lane: str, limit: int) -> list[Loaded]:
    loaded = []
    for ref in backend.list(sub, lane, limit=limit):
        try:
            item, payload = backend.get(ref)
        except SpoolItemNotFound:
            continue
        loaded.append(Loaded(ref, item, payload))
    return loaded


def settle(
    emit: Callable[[str, list[ev.SpoolEvent]], None],
    sub: str,
    backend: SpoolBackend,
    pending: list[tuple[ev.SpoolEvent, SpoolRef]],
) -> None:
    """The ``replayed`` events of the items replayed so far, in one call, then their objects deleted."""
    if not pending:
        return
    emit(sub, [event for event, _ref in pending])
    for _event, ref in pending:
        _delete(backend, ref)
    pending.clear()


def _delete(backend: SpoolBackend, ref: SpoolRef) -> None:
    try:
        backend.delete(ref)
    except SpoolVersionConflict:  # its attempts were rewritten meanwhile; it is replayed all the same
        backend.delete(SpoolRef(ref.name, None, ref.size))
