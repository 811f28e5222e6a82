"""The spool backend contract: one suite, run against every adapter.

A subclass provides the ``backend`` fixture (an empty spool) and :meth:`write_raw`, which stores
bytes under a name bypassing the adapter, so a damaged object can be planted.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from datetime import UTC, datetime
from typing import Any

import pytest

from noetl_cloud.spool import (
    ObjectSpool,
    SpoolBackend,
    SpoolError,
    SpoolItem,
    SpoolItemCorrupted,
    SpoolItemExists,
    SpoolItemNotFound,
    SpoolRef,
    SpoolVersionConflict,
    object_name,
)

PLAN = {
    "playbook": "catalog/ingest/devices",
    "execution_pool": "iot",
    "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    "dedup": {"key": "idem-1", "window_s": 600},
}


def new_subscription() -> str:
    return f"sub-{secrets.token_hex(4)}"


def make_item(
    subscription: str, recv_seq: int, payload: bytes, *, lane: str = "lane-a", message_id: str | None = None
) -> SpoolItem:
    fields: dict[str, Any] = {
        "subscription": subscription,
        "lane": lane,
        "source": "pubsub://projects/p/subscriptions/devices",
        "message_id": message_id or f"m-{recv_seq}",
        "idempotency_key": f"idem-{recv_seq}",
        "recv_seq": recv_seq,
        "ordering_key": lane,
        "attempts": 0,
        "spooled_at": datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "reason": "circuit_open",
        "plan": PLAN,
    }
    return SpoolItem.for_payload(payload, **fields)


class SpoolBackendContract(ABC):
    @abstractmethod
    def write_raw(self, backend: SpoolBackend, name: str, data: bytes) -> None:
        """Store ``data`` under ``name`` directly, bypassing the adapter's checks."""

    def test_the_adapter_implements_the_port(self, backend: SpoolBackend) -> None:
        assert isinstance(backend, SpoolBackend) and isinstance(backend, ObjectSpool)

    def test_put_then_get_round_trips_the_exact_bytes_and_metadata(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        payload = bytes(range(256)) + b"\n\r\n{not json}\x00" + "ünïcode".encode()
        item = make_item(sub, 42, payload)
        ref = backend.put(item, payload)
        assert ref.name == f"{sub}/lane-a/{42:020d}-m-42" == object_name(item)
        assert ref.version is not None and ref.size > len(payload)
        read_item, read_payload = backend.get(ref)
        assert read_payload == payload and read_item == item
        assert read_item.plan == PLAN and read_item.spooled_at == item.spooled_at
        empty = make_item(sub, 43, b"")
        assert backend.get(backend.put(empty, b"")) == (empty, b"")

    def test_put_refuses_a_payload_the_item_does_not_describe(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        with pytest.raises(ValueError):
            backend.put(make_item(sub, 1, b"one"), b"two")
        assert backend.list(sub) == []

    def test_get_of_a_missing_object_is_not_found(self, backend: SpoolBackend) -> None:
        with pytest.raises(SpoolItemNotFound):
            backend.get(SpoolRef(name=f"{new_subscription()}/lane-a/{1:020d}-m-1", version=None, size=0))

    def test_a_payload_not_matching_its_sha256_is_detected(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 7, b"original payload")
        ref = backend.put(item, b"original payload")
        header = backend.get(ref)  # intact: fine
        assert header[1] == b"original payload"
        _item, stored = self._stored(backend, ref)
        self.write_raw(backend, ref.name, stored.replace(b"original payload", b"tampered payload"))
        with pytest.raises(SpoolItemCorrupted) as info:
            backend.get(ref)
        assert info.value.code == "spool_checksum_mismatch" and not info.value.retryable
        self.write_raw(backend, ref.name, b"no header at all")
        with pytest.raises(SpoolItemCorrupted):
            backend.get(ref)

    def _stored(self, backend: SpoolBackend, ref: SpoolRef) -> tuple[SpoolRef, bytes]:
        assert isinstance(backend, ObjectSpool)
        return backend._read(ref.name)

    def test_a_second_put_of_the_same_name_raises_item_exists_and_keeps_the_first(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 5, b"first")
        ref = backend.put(item, b"first")
        with pytest.raises(SpoolItemExists) as info:
            backend.put(make_item(sub, 5, b"second"), b"second")
        assert (info.value.name, info.value.status, info.value.code) == (ref.name, 409, "spool_item_exists")
        assert backend.get(ref) == (item, b"first")

    def test_list_returns_receive_order_within_a_lane_even_when_written_out_of_order(
        self, backend: SpoolBackend
    ) -> None:
        sub = new_subscription()
        seqs = [10, 9, 100, 1, 2**63 + 5, 11, 0]
        for seq in seqs:
            backend.put(make_item(sub, seq, b"p%d" % seq), b"p%d" % seq)
        refs = backend.list(sub, "lane-a")
        assert [backend.get(ref)[0].recv_seq for ref in refs] == sorted(seqs)
        assert [ref.name for ref in backend.list(sub, "lane-a", limit=3)] == [ref.name for ref in refs[:3]]
        assert backend.list(sub, "no-such-lane") == []
        with pytest.raises(ValueError):
            backend.list(sub, limit=0)

    def test_lanes_are_listed_and_listing_without_a_lane_goes_lane_by_lane(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        for lane, seq in (("device-b", 1), ("device-a", 3), ("device-a", 2), ("dlq", 4), ("device-c", 0)):
            backend.put(make_item(sub, seq, b"x", lane=lane), b"x")
        # in encoded-name order: the lane "dlq" is stored as "%64lq", which sorts first
        assert backend.lanes(sub) == ["dlq", "device-a", "device-b", "device-c"]
        everything = backend.list(sub)
        assert [(backend.get(r)[0].lane, backend.get(r)[0].recv_seq) for r in everything] == [
            ("dlq", 4),
            ("device-a", 2),
            ("device-a", 3),
            ("device-b", 1),
            ("device-c", 0),
        ]
        assert len(backend.list(sub, limit=3)) == 3
        assert backend.lanes(new_subscription()) == []
        assert backend.lanes(sub, dlq=True) == []

    def test_delete_removes_it_and_a_second_delete_returns_false(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        ref = backend.put(make_item(sub, 1, b"x"), b"x")
        assert backend.delete(ref) is True
        with pytest.raises(SpoolItemNotFound):
            backend.get(ref)
        assert backend.delete(ref) is False
        assert backend.list(sub) == [] and backend.lanes(sub) == []
        again = backend.put(make_item(sub, 1, b"x"), b"x")  # the name is free again
        assert backend.delete(SpoolRef(again.name, None, 0)) is True

    def test_update_attempts_re_puts_under_the_same_name_and_stale_refs_conflict(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 8, b"payload")
        ref = backend.put(item, b"payload")
        updated = backend.update_attempts(ref, 3)
        assert updated.name == ref.name and updated.version != ref.version
        assert backend.get(updated) == (item.model_copy(update={"attempts": 3}), b"payload")
        with pytest.raises(SpoolVersionConflict):
            backend.update_attempts(ref, 4)
        with pytest.raises(SpoolVersionConflict):
            backend.delete(ref)  # a stale reference deletes nothing
        assert backend.get(updated)[0].attempts == 3
        assert backend.delete(updated) is True
        with pytest.raises(SpoolItemNotFound):
            backend.update_attempts(updated, 5)

    def test_dead_letter_move_keeps_the_item_readable_under_the_dlq_prefix_and_removes_it_from_the_lane(
        self, backend: SpoolBackend
    ) -> None:
        sub = new_subscription()
        item = make_item(sub, 12, b"poison")
        ref = backend.update_attempts(backend.put(item, b"poison"), 5)
        kept = backend.put(make_item(sub, 13, b"fine"), b"fine")
        dead = backend.move_to_dlq(ref, "max_replay_attempts")
        assert dead.name == f"{sub}/dlq/lane-a/{12:020d}-m-12"
        dead_item, payload = backend.get(dead)
        assert payload == b"poison"
        assert dead_item == item.model_copy(update={"attempts": 5, "dlq_reason": "max_replay_attempts"})
        assert backend.list(sub, "lane-a") == [kept]
        assert backend.lanes(sub) == ["lane-a"] and backend.lanes(sub, dlq=True) == ["lane-a"]
        assert [r.name for r in backend.list(sub, dlq=True)] == [dead.name]
        with pytest.raises(SpoolItemNotFound):
            backend.get(ref)

    def test_dead_letter_move_finishes_a_move_interrupted_after_its_copy(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 20, b"poison")
        ref = backend.put(item, b"poison")
        first = backend.move_to_dlq(ref, "poison")
        again = backend.put(item, b"poison")  # as if the delete had not happened
        second = backend.move_to_dlq(again, "poison")
        assert second.name == first.name and backend.list(sub) == []
        stale = backend.put(item, b"poison")
        backend.update_attempts(stale, 1)
        with pytest.raises(SpoolVersionConflict):
            backend.move_to_dlq(stale, "poison")

    def test_resend_moves_a_dead_letter_back_to_its_place_in_the_lane_with_attempts_reset(
        self, backend: SpoolBackend
    ) -> None:
        sub = new_subscription()
        item = make_item(sub, 30, b"poison")
        dead = backend.move_to_dlq(backend.update_attempts(backend.put(item, b"poison"), 5), "poison")
        newer = backend.put(make_item(sub, 31, b"later"), b"later")
        older = backend.put(make_item(sub, 29, b"earlier"), b"earlier")
        live = backend.resend(dead)
        assert live.name == object_name(item) and backend.get(live) == (item, b"poison")  # attempts 0, no reason
        # receive order within the lane: the resent item sits between what came before and after it
        assert [r.name for r in backend.list(sub, "lane-a")] == [older.name, live.name, newer.name]
        assert backend.list(sub, dlq=True) == [] and backend.lanes(sub, dlq=True) == []
        with pytest.raises(SpoolItemNotFound):  # resent already: nothing left to resend
            backend.resend(dead)

    def test_resend_finishes_a_resend_interrupted_after_its_copy(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 40, b"poison")
        dead = backend.move_to_dlq(backend.put(item, b"poison"), "poison")
        first = backend.resend(dead)
        again = backend.put_dead(item, b"poison", "poison")  # as if the delete had not happened
        second = backend.resend(again)
        assert second.name == first.name and backend.list(sub, dlq=True) == []
        assert backend.get(second) == (item, b"poison") and len(backend.list(sub)) == 1

    def test_resend_resets_a_live_copy_an_interrupted_dead_letter_move_left(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 50, b"poison")
        live = backend.update_attempts(backend.put(item, b"poison"), 5)
        dead = backend.put_dead(item.model_copy(update={"attempts": 5}), b"poison", "poison")  # copy, no delete
        revived = backend.resend(dead)
        assert revived.name == live.name and backend.get(revived) == (item, b"poison")
        assert backend.list(sub, dlq=True) == []

    def test_resend_refuses_live_items_other_messages_and_stale_references(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        live = backend.put(make_item(sub, 60, b"live"), b"live")
        with pytest.raises(SpoolError) as info:
            backend.resend(live)
        assert info.value.code == "spool_not_dead_lettered" and backend.list(sub) == [live]
        # another message under the same live name (same sequence and id, other bytes): not overwritten
        dead = backend.put_dead(make_item(sub, 60, b"dead"), b"dead", "poison")
        with pytest.raises(SpoolItemExists):
            backend.resend(dead)
        assert backend.get(live)[1] == b"live" and backend.list(sub, dlq=True) == [dead]
        stale = SpoolRef(dead.name, "not-its-version", dead.size)
        with pytest.raises(SpoolVersionConflict):
            backend.resend(stale)
        with pytest.raises(SpoolItemNotFound):
            backend.resend(SpoolRef(f"{sub}/dlq/lane-a/{61:020d}-m-61", None, 0))

    def test_usage_counts_items_and_bytes(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        assert backend.usage(sub) == (0, 0)
        refs = [backend.put(make_item(sub, i, b"x" * i, lane=f"l{i % 2}"), b"x" * i) for i in range(5)]
        assert backend.usage(sub) == (5, sum(ref.size for ref in refs))
        backend.move_to_dlq(refs[0], "poison")
        backend.delete(refs[1])
        assert backend.usage(sub) == (3, sum(ref.size for ref in refs[2:]))
        count, size = backend.usage(sub, dlq=True)
        assert count == 1 and size > refs[0].size  # the copy also records its dlq_reason
        assert backend.usage(new_subscription()) == (0, 0)

    @pytest.mark.parametrize(
        "message_id",
        ["a/b/../c", "with space", "ünï/cödé ✓", "..", ".", "%2F", "~x", "dlq", "x" * 400, "-0-"],
    )
    def test_names_with_awkward_message_ids_are_encoded_safely(self, backend: SpoolBackend, message_id: str) -> None:
        sub = new_subscription()
        lane = "tenant/device 7 ü"
        item = make_item(sub, 1, b"p", lane=lane, message_id=message_id)
        ref = backend.put(item, b"p")
        prefix = f"{sub}/tenant%2Fdevice%207%20%C3%BC/{1:020d}-"
        assert ref.name.startswith(prefix) and ref.name.isascii()
        assert "/" not in ref.name[len(prefix) :] and len(ref.name) < 300
        assert backend.lanes(sub) == [lane]
        assert backend.list(sub, lane) == [ref]
        assert backend.get(ref) == (item, b"p")
        other = make_item(sub, 2, b"q", lane="tenant", message_id=message_id)
        backend.put(other, b"q")
        assert backend.lanes(sub) == ["tenant", lane]
        dead = backend.move_to_dlq(ref, "poison")
        assert backend.lanes(sub, dlq=True) == [lane] and backend.get(dead)[0].message_id == message_id

    def test_put_dead_writes_straight_under_the_dead_letter_prefix_create_only(self, backend: SpoolBackend) -> None:
        sub = new_subscription()
        item = make_item(sub, 9, b"refused")
        ref = backend.put_dead(item, b"refused", "spool_full")
        assert ref.name == object_name(item, dlq=True)
        assert backend.list(sub) == [] and backend.list(sub, dlq=True) == [ref]
        stored, payload = backend.get(ref)
        assert payload == b"refused" and stored.dlq_reason == "spool_full"
        with pytest.raises(SpoolItemExists):
            backend.put_dead(item, b"refused", "spool_full")

    def test_subscriptions_lists_every_subscription_with_objects_decoded(self, backend: SpoolBackend) -> None:
        live, dead = f"{new_subscription()}/with slash", new_subscription()
        backend.put(make_item(live, 1, b"a"), b"a")
        backend.put_dead(make_item(dead, 2, b"b"), b"b", "spool_full")
        found = backend.subscriptions()
        assert live in found and dead in found
        assert found == sorted(found, key=lambda s: s.replace("/", "%2F").replace(" ", "%20"))
