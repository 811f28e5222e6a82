"""The payload store contract: one suite, run against every adapter (memory, filesystem, GCS, S3).

A subclass provides the ``store`` fixture (an empty store of tenant ``t1`` / org ``o1``) and
:meth:`version`, an adapter-specific token that changes whenever the object at a key is (re)written,
to prove that storing the same bytes twice writes nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator

import pytest

from noetl_cloud.payload import (
    ARROW_STREAM,
    InvalidPayloadUri,
    ObjectPayloadStore,
    PayloadCorrupted,
    PayloadNotFound,
    PayloadReference,
    load_rows,
    store_rows,
)

TENANT, ORG = "t1", "o1"


class PayloadStoreContract(ABC):
    @abstractmethod
    def version(self, store: ObjectPayloadStore, key: str) -> str | None:
        """A token of the object's current write (generation, ETag+mtime, inode...), None when absent."""

    @abstractmethod
    def damage(self, store: ObjectPayloadStore, key: str, data: bytes) -> None:
        """Overwrite the object at ``key`` behind the adapter's back."""

    def test_the_address_is_the_sha256_of_the_bytes_under_the_tenant_and_org(self, store: ObjectPayloadStore) -> None:
        data = secrets.token_bytes(100)
        ref = store.store(data, "application/octet-stream")
        digest = hashlib.sha256(data).hexdigest()
        assert ref.sha256 == digest and ref.size_bytes == 100
        assert ref.uri == f"noetl://tenant/{TENANT}/org/{ORG}/payloads/sha256/{digest}"
        assert store.exists(ref) and store.fetch(ref) == data

    def test_storing_the_same_bytes_again_writes_nothing(self, store: ObjectPayloadStore) -> None:
        data = secrets.token_bytes(64)
        first = store.store(data)
        before = self.version(store, first.key)
        uploads = store.uploads
        second = store.store(iter([data[:10], data[10:]]))
        assert second == first and store.uploads == uploads
        assert self.version(store, first.key) == before

    def test_concurrent_writers_of_the_same_bytes_leave_one_intact_object(self, store: ObjectPayloadStore) -> None:
        data = secrets.token_bytes(4096)
        refs: list[PayloadReference] = []
        threads = [threading.Thread(target=lambda: refs.append(store.store(data))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(refs)) == 1 and store.fetch(refs[0]) == data

    def test_a_streamed_write_and_a_chunked_read_round_trip_large_payloads(self, store: ObjectPayloadStore) -> None:
        blocks = [secrets.token_bytes(256 * 1024) for _ in range(12)]  # 3 MiB, written as 12 chunks

        def chunks() -> Iterator[bytes]:
            yield from blocks

        ref = store.store(chunks(), "application/x-test")
        assert ref.size_bytes == 3 * 1024 * 1024 and ref.media_type == "application/x-test"
        read = list(store.open(ref, chunk_bytes=512 * 1024))
        assert len(read) >= 2 and b"".join(read) == b"".join(blocks)

    def test_a_missing_object_is_payload_not_found(self, store: ObjectPayloadStore) -> None:
        ref = store.reference(hashlib.sha256(b"never stored").hexdigest(), "application/octet-stream", 12)
        assert not store.exists(ref)
        with pytest.raises(PayloadNotFound):
            store.fetch(ref)
        assert store.delete(ref) is False

    def test_bytes_that_do_not_hash_to_the_digest_are_refused_on_read(self, store: ObjectPayloadStore) -> None:
        ref = store.store(b"the original bytes")
        self.damage(store, ref.key, b"tampered bytes!!!!")
        with pytest.raises(PayloadCorrupted) as caught:
            store.fetch(ref)
        assert caught.value.code == "payload_digest_mismatch"

    def test_a_reference_of_another_tenant_is_refused(self, store: ObjectPayloadStore) -> None:
        ref = store.store(b"mine")
        foreign = ref.model_copy(update={"uri": ref.uri.replace(f"tenant/{TENANT}/", "tenant/other/")})
        with pytest.raises(InvalidPayloadUri):
            store.fetch(foreign)

    def test_delete_removes_the_object(self, store: ObjectPayloadStore) -> None:
        ref = store.store(b"to be retired")
        assert store.delete(ref) is True and not store.exists(ref)

    def test_a_row_window_round_trips_as_an_arrow_ipc_stream(self, store: ObjectPayloadStore) -> None:
        rows = [{"id": i, "name": f"p{i}", "score": i / 2, "tags": ["a", "b"][: i % 3]} for i in range(50)]
        ref = store_rows(store, rows)
        assert ref["media_type"] == ARROW_STREAM and ref["row_count"] == 50 and ref["encoding"] == "columns"
        assert len(ref["schema_digest"]) == 64
        assert load_rows(store, ref) == rows
        again = store_rows(store, rows)
        assert again == ref  # same bytes, same object
