"""The spool backend port: durable storage of store-and-forward items (RFC §8.2), storage only.

The spool engine (ordering, drain, retention), the circuit breaker and the ingress integration
use this port; they are not here. Object layout and bytes are described in
:mod:`noetl_cloud.spool.item`.

Semantics every adapter keeps (``tests/contracts/spool.py`` proves them):

* One object per item, named by :func:`~noetl_cloud.spool.item.object_name`; listing a lane is in
  name order, which is receive order (``recv_seq``) within the lane.
* ``put`` is create-only: when the name exists, :class:`SpoolItemExists` is raised and nothing is
  written. A put retried after a lost answer may therefore see its own write as "exists"; the
  caller treats that as spooled (``get`` shows the sha256 when it must be sure).
* Objects are immutable in place: ``update_attempts`` **re-puts** the whole object under the
  same name, conditioned on the version the reference names (GCS generation, S3 ETag, file
  identity, a counter in memory); it returns the new reference. A stale reference is
  :class:`SpoolVersionConflict`, a vanished object :class:`SpoolItemNotFound`.
* ``delete`` is conditioned on the reference's version when it has one: ``True`` when deleted,
  ``False`` when the object was already gone, :class:`SpoolVersionConflict` when it was rewritten.
* ``move_to_dlq`` copies the item, with ``dlq_reason`` set, create-only under
  ``<subscription>/dlq/<lane>/`` and then deletes the live object. It can be run again after a
  crash between the two steps (an identical dead-letter copy counts as done).
* ``resend`` is the way back: it copies a dead-lettered item, ``attempts`` reset to 0 and
  ``dlq_reason`` cleared, create-only under its live name (same lane, same ``recv_seq``, so it
  takes its place in receive order again), and then deletes the dead letter. Run again after a
  crash between the two steps, it finds its own live copy (same message, sequence and sha256) and
  finishes; a live copy an interrupted ``move_to_dlq`` left behind is reset in place.
* ``get`` verifies the payload against the recorded sha256: :class:`SpoolItemCorrupted`
  otherwise. Objects under a lane whose last segment is not ``<recv_seq>-<id>`` are ignored.
* A backend outage is :class:`~noetl_cloud.errors.Unavailable` (retryable); any other refusal
  :class:`SpoolError`. No library exception escapes.

:class:`ObjectSpool` implements the operations once over a few object-store primitives an
adapter provides.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from typing import Final, Protocol, runtime_checkable

from noetl_cloud.spool.item import (
    SpoolError,
    SpoolItem,
    SpoolItemCorrupted,
    SpoolItemExists,
    SpoolItemNotFound,
    SpoolRef,
    SpoolVersionConflict,
    decode_lane,
    decode_object,
    dlq_prefix,
    encode_object,
    is_item_leaf,
    lane_prefix,
    object_name,
    subscription_prefix,
)

DEFAULT_LIMIT: Final = 1000

__all__ = [
    "DEFAULT_LIMIT",
    "ObjectSpool",
    "SpoolBackend",
    "SpoolError",
    "SpoolItem",
    "SpoolItemCorrupted",
    "SpoolItemExists",
    "SpoolItemNotFound",
    "SpoolRef",
    "SpoolVersionConflict",
]


@runtime_checkable
class SpoolBackend(Protocol):
    """Durable storage of spooled items, one object each, listed in receive order per lane."""

    def put(self, item: SpoolItem, payload: bytes) -> SpoolRef:
        """Store ``item`` and its exact ``payload`` under the item's name, create-only.

        Raises :class:`SpoolItemExists` when the name is taken, ``ValueError`` when ``payload``
        does not match ``item.sha256`` / ``item.payload_bytes``.
        """
        ...

    def get(self, ref: SpoolRef) -> tuple[SpoolItem, bytes]:
        """The item and its exact payload, sha256-verified (:class:`SpoolItemCorrupted` otherwise).

        Reads whatever version is stored; :class:`SpoolItemNotFound` when there is none.
        """
        ...

    def list(
        self, subscription: str, lane: str | None = None, *, limit: int = DEFAULT_LIMIT, dlq: bool = False
    ) -> builtins.list[SpoolRef]:
        """Up to ``limit`` items of one lane in receive order, or of every lane (lane by lane, in lane-name order).

        ``dlq=True`` lists the dead-lettered items instead of the live ones.
        """
        ...

    def lanes(self, subscription: str, *, dlq: bool = False) -> builtins.list[str]:
        """The lanes (decoded, sorted by encoded name) that hold at least one item; dead-letter lanes with ``dlq``."""
        ...

    def update_attempts(self, ref: SpoolRef, attempts: int) -> SpoolRef:
        """Re-put the item with ``attempts`` set, conditioned on ``ref.version``; the new reference.

        :class:`SpoolVersionConflict` when the object was rewritten since ``ref`` was taken,
        :class:`SpoolItemNotFound` when it is gone.
        """
        ...

    def delete(self, ref: SpoolRef) -> bool:
        """Delete the object (only at ``ref.version`` when set); ``False`` when it was already gone."""
        ...

    def move_to_dlq(self, ref: SpoolRef, reason: str) -> SpoolRef:
        """Dead-letter the item: a copy with ``dlq_reason`` under ``<subscription>/dlq/<lane>/``, then delete it.

        Returns the dead-letter reference. :class:`SpoolVersionConflict` when the live object
        changed under ``ref`` (the copy stays; running the move again finishes it).
        """
        ...

    def usage(self, subscription: str, *, dlq: bool = False) -> tuple[int, int]:
        """``(items, bytes)`` of the subscription's live items (its dead-lettered ones with ``dlq``), for retention."""
        ...

    def put_dead(self, item: SpoolItem, payload: bytes, reason: str) -> SpoolRef:
        """Store ``item`` (``dlq_reason`` set to ``reason``) straight under the dead-letter prefix, create-only.

        For a message refused by retention (``on_full: drop_to_dlq``): it never becomes a live item.
        """
        ...

    def resend(self, ref: SpoolRef) -> SpoolRef:
        """Move a dead letter back to its lane's live spool (``attempts`` 0, no ``dlq_reason``); the live reference.

        The live name keeps the item's ``recv_seq``, so the lane replays it in receive order.
        :class:`SpoolItemNotFound` when there is no such dead letter (already resent),
        :class:`SpoolError` (``spool_not_dead_lettered``) for a live item, :class:`SpoolVersionConflict`
        when ``ref.version`` is not the dead letter's version.
        """
        ...

    def subscriptions(self) -> builtins.list[str]:
        """The subscriptions (decoded, sorted by encoded name) that hold at least one object, live or dead-lettered."""
        ...


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    return limit


class ObjectSpool(ABC):
    """The port's operations over an adapter's object-store primitives."""

    # -- primitives ------------------------------------------------------------------------------

    @abstractmethod
    def _create(self, name: str, data: bytes) -> SpoolRef:
        """Write a new object; :class:`SpoolItemExists` when ``name`` exists (nothing written)."""

    @abstractmethod
    def _replace(self, ref: SpoolRef, data: bytes) -> SpoolRef:
        """Overwrite ``ref.name`` if it is at ``ref.version`` (any version when ``None``).

        :class:`SpoolItemNotFound` when absent, :class:`SpoolVersionConflict` when at another version.
        """

    @abstractmethod
    def _read(self, name: str) -> tuple[SpoolRef, bytes]:
        """The object's reference and bytes; :class:`SpoolItemNotFound` when absent."""

    @abstractmethod
    def _list(self, prefix: str, limit: int | None) -> builtins.list[SpoolRef]:
        """Objects whose names start with ``prefix``, in name order, at most ``limit`` (``None``: all)."""

    @abstractmethod
    def _children(self, prefix: str) -> list[str]:
        """The next name segments below ``prefix`` that lead to objects, sorted, without the ``/``."""

    @abstractmethod
    def _delete(self, ref: SpoolRef) -> bool:
        """Delete at ``ref.version`` (any when ``None``).

        ``False`` when absent, :class:`SpoolVersionConflict` when at another version.
        """

    # -- the port --------------------------------------------------------------------------------

    def put(self, item: SpoolItem, payload: bytes) -> SpoolRef:
        return self._create(object_name(item), encode_object(item, payload))

    def get(self, ref: SpoolRef) -> tuple[SpoolItem, bytes]:
        _stored, data = self._read(ref.name)
        return self._decode(ref.name, data)

    @staticmethod
    def _decode(name: str, data: bytes) -> tuple[SpoolItem, bytes]:
        item, payload = decode_object(name, data)
        if name not in (object_name(item), object_name(item, dlq=True)):
            raise SpoolItemCorrupted(f"spool object {name!r} holds another item", details={"name": name})
        return item, payload

    def list(
        self, subscription: str, lane: str | None = None, *, limit: int = DEFAULT_LIMIT, dlq: bool = False
    ) -> builtins.list[SpoolRef]:
        _check_limit(limit)
        lanes = [lane] if lane is not None else self.lanes(subscription, dlq=dlq)
        found: list[SpoolRef] = []
        for each in lanes:
            refs = self._list(lane_prefix(subscription, each, dlq=dlq), limit - len(found))
            found += [ref for ref in refs if is_item_leaf(ref.name.rsplit("/", 1)[-1])]
            if len(found) >= limit:
                break
        return found[:limit]

    def lanes(self, subscription: str, *, dlq: bool = False) -> builtins.list[str]:
        prefix = dlq_prefix(subscription) if dlq else subscription_prefix(subscription)
        segments = self._children(prefix)
        if not dlq:
            segments = [s for s in segments if s != "dlq"]
        return [decode_lane(s) for s in segments]

    def update_attempts(self, ref: SpoolRef, attempts: int) -> SpoolRef:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ValueError(f"attempts must be a non-negative integer, not {attempts!r}")
        item, payload = self.get(ref)
        return self._replace(ref, encode_object(item.model_copy(update={"attempts": attempts}), payload))

    def delete(self, ref: SpoolRef) -> bool:
        return self._delete(ref)

    def move_to_dlq(self, ref: SpoolRef, reason: str) -> SpoolRef:
        stored, data = self._read(ref.name)
        if ref.version is not None and stored.version != ref.version:
            raise SpoolVersionConflict(ref.name, ref.version, stored.version)
        item, payload = self._decode(ref.name, data)
        if ref.name == object_name(item, dlq=True):
            raise SpoolError(f"spool item {ref.name!r} is already dead-lettered", code="spool_already_dead_lettered")
        dead = item.model_copy(update={"dlq_reason": reason})
        name = object_name(dead, dlq=True)
        try:
            moved = self._create(name, encode_object(dead, payload))
        except SpoolItemExists:
            moved, existing = self._read(name)  # a move interrupted after its copy: finish it
            earlier, _payload = self._decode(name, existing)
            if (earlier.message_id, earlier.recv_seq, earlier.sha256) != (item.message_id, item.recv_seq, item.sha256):
                raise
        self._delete(stored)
        return moved

    def resend(self, ref: SpoolRef) -> SpoolRef:
        stored, data = self._read(ref.name)
        if ref.version is not None and stored.version != ref.version:
            raise SpoolVersionConflict(ref.name, ref.version, stored.version)
        item, payload = self._decode(ref.name, data)
        if ref.name != object_name(item, dlq=True):
            raise SpoolError(f"spool item {ref.name!r} is not dead-lettered", code="spool_not_dead_lettered")
        live = item.model_copy(update={"attempts": 0, "dlq_reason": None})
        name = object_name(live)
        try:
            revived = self._create(name, encode_object(live, payload))
        except SpoolItemExists:
            # A resend interrupted after its copy, or a move to the dead letters interrupted before its
            # delete: the live object is this very message; make it a fresh live item and finish.
            revived, existing = self._read(name)
            earlier, _payload = self._decode(name, existing)
            if (earlier.message_id, earlier.recv_seq, earlier.sha256) != (item.message_id, item.recv_seq, item.sha256):
                raise
            if earlier != live:
                revived = self._replace(revived, encode_object(live, payload))
        self._delete(stored)
        return revived

    def put_dead(self, item: SpoolItem, payload: bytes, reason: str) -> SpoolRef:
        dead = item.model_copy(update={"dlq_reason": reason})
        return self._create(object_name(dead, dlq=True), encode_object(dead, payload))

    def subscriptions(self) -> builtins.list[str]:
        return [decode_lane(segment) for segment in self._children("")]

    def usage(self, subscription: str, *, dlq: bool = False) -> tuple[int, int]:
        refs: list[SpoolRef] = []
        for lane in self.lanes(subscription, dlq=dlq):
            refs += self._list(lane_prefix(subscription, lane, dlq=dlq), None)
        items = [ref for ref in refs if is_item_leaf(ref.name.rsplit("/", 1)[-1])]
        return len(items), sum(ref.size for ref in items)
