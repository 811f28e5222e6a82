"""The key-value contract on the Firestore emulator, and what is particular to the Firestore adapter.

Each test gets its own collection (``kv-test-<hex>``). The emulator is slow under contention on
one document (docs/local.md), so the concurrent tests stay at the contract's small sizes.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from noetl_cloud.errors import ConfigError, Unavailable
from noetl_cloud.kv.firestore import FirestoreKeyValueStore, document_id
from noetl_cloud.kv.port import VersionConflict
from noetl_cloud.settings import Settings
from tests.contracts.kv import FakeClock, KeyValueContract, new_key

PROJECT = "noetl-local"


def _project(env: dict[str, str]) -> str:
    return env.get("NOETL_PROJECT_ID") or PROJECT


def _store(env: dict[str, str], clock: FakeClock, collection: str) -> FirestoreKeyValueStore:
    return FirestoreKeyValueStore(
        _project(env), collection=collection, emulator_host=env["FIRESTORE_EMULATOR_HOST"], clock=clock
    )


class TestFirestoreKeyValueStore(KeyValueContract):
    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, local_env: dict[str, str], clock: FakeClock) -> Iterator[FirestoreKeyValueStore]:
        store = _store(local_env, clock, f"kv-test-{secrets.token_hex(6)}")
        yield store
        store.close()


@pytest.fixture
def raw(local_env: dict[str, str]) -> Iterator[firestore.Client]:
    """A plain client on the emulator, to look at the documents the adapter writes."""
    client = firestore.Client(project=_project(local_env), credentials=AnonymousCredentials())
    yield client
    client.close()


def test_document_ids_are_url_safe_base64_or_a_hash_for_long_keys() -> None:
    key = "ingress/seen/listener-a/msg-1"
    assert document_id(key) == "k." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")
    assert "/" not in document_id("/" * 50) and document_id(".") != document_id("..")
    long_key = "x" * 2000
    assert document_id(long_key) == "h." + hashlib.sha256(long_key.encode()).hexdigest()
    assert len(document_id("y" * 760).encode()) <= 1024


def test_documents_keep_the_key_and_a_timestamp_for_the_ttl_policy(
    local_env: dict[str, str], raw: firestore.Client
) -> None:
    clock, collection = FakeClock(), f"kv-test-{secrets.token_hex(6)}"
    store = _store(local_env, clock, collection)
    short, long = new_key("ingress/seen/listener-a"), new_key("x" * 2000)
    store.create(short, {"a": [1, 2]}, ttl_s=60)
    store.create(long, {})
    docs: dict[str, dict[str, Any]] = {doc.id: doc.to_dict() or {} for doc in raw.collection(collection).stream()}
    assert set(docs) == {document_id(short), document_id(long)} and document_id(long).startswith("h.")
    fields, entry = docs[document_id(short)], store.get(short)
    assert entry is not None
    assert (fields["key"], fields["value_json"], fields["version"]) == (short, '{"a":[1,2]}', 1)
    assert isinstance(fields["expires_at"], datetime) and fields["expires_at"] == entry.expires_at
    assert docs[document_id(long)]["key"] == long and docs[document_id(long)]["expires_at"] is None
    store.close()


def test_an_expired_document_is_deleted_when_read(local_env: dict[str, str], raw: firestore.Client) -> None:
    clock, collection = FakeClock(), f"kv-test-{secrets.token_hex(6)}"
    store = _store(local_env, clock, collection)
    key = new_key()
    store.create(key, {}, ttl_s=1)
    ref = raw.collection(collection).document(document_id(key))
    assert ref.get().exists
    clock.advance(2)
    assert store.get(key) is None
    assert not ref.get().exists
    store.close()


def test_construction_connects_to_nothing_and_from_settings_reads_the_settings() -> None:
    store = FirestoreKeyValueStore("p", emulator_host="127.0.0.1:1")
    assert store._client is None
    built = FirestoreKeyValueStore.from_settings(
        Settings(project_id="proj", firestore_emulator_host="127.0.0.1:9"), collection="noetl-kv-dev"
    )
    assert (built.project_id, built.collection, built.emulator_host) == ("proj", "noetl-kv-dev", "127.0.0.1:9")
    with pytest.raises(ConfigError) as info:
        FirestoreKeyValueStore.from_settings(Settings())
    assert "NOETL_PROJECT_ID" in info.value.message
    with pytest.raises(ConfigError):
        FirestoreKeyValueStore("p", collection="a/b")


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_an_unreachable_firestore_is_unavailable_and_retryable_soon(local_env: dict[str, str]) -> None:
    # FIRESTORE_EMULATOR_HOST names the live emulator meanwhile: the explicit host must win.
    store = FirestoreKeyValueStore(PROJECT, emulator_host=_closed_port(), timeout_s=1.0)
    operations = {
        "get": lambda: store.get("k"),
        "create": lambda: store.create("k", {}),
        "compare_and_set": lambda: store.compare_and_set("k", {}, expected_version=None),
        "delete": lambda: store.delete("k"),
        "acquire_lease": lambda: store.acquire_lease("l", "me", 5),
    }
    for name, operation in operations.items():
        started = time.monotonic()
        with pytest.raises(Unavailable) as info:
            operation()
        assert info.value.retryable and info.value.status == 503, name
        assert time.monotonic() - started < 10, f"{name} took {time.monotonic() - started:.1f} s"
    store.close()


def _counting_transactions(store: FirestoreKeyValueStore) -> list[int]:
    """How many Firestore transactions ``store`` begins from now on."""
    client, counted = store._firestore(), [0]
    begin = client.transaction

    def counting(**kwargs: Any) -> Any:
        counted[0] += 1
        return begin(**kwargs)

    client.transaction = counting
    return counted


def test_a_new_keys_create_and_a_compare_and_set_of_its_own_write_are_one_commit_each(
    local_env: dict[str, str],
) -> None:
    clock, collection = FakeClock(), f"kv-test-{secrets.token_hex(6)}"
    store, other = _store(local_env, clock, collection), _store(local_env, clock, collection)
    transactions = _counting_transactions(store)
    key = new_key("ingress/seen/l")
    created = store.create(key, {"state": "in_flight"}, ttl_s=60)
    assert created is not None and created.version == 1
    accepted = store.compare_and_set(key, {"state": "accepted"}, expected_version=1, ttl_s=600)
    assert accepted.version == 2 and transactions[0] == 0  # two commits, no transaction
    assert store.create(key, {"state": "in_flight"}) is None and transactions[0] == 1  # there: a transaction
    # Another instance wrote since: this one's remembered update time is stale, Firestore refuses the
    # precondition, and the transaction answers the conflict with the version it finds.
    other.compare_and_set(key, {"state": "taken"}, expected_version=2)
    with pytest.raises(VersionConflict) as conflict:
        store.compare_and_set(key, {"state": "mine"}, expected_version=2)
    assert (conflict.value.expected, conflict.value.actual) == (2, 3)
    entry = store.get(key)
    assert entry is not None and entry.value == {"state": "taken"}
    store.close()
    other.close()


def test_an_expired_write_of_this_process_is_not_compared_and_set_in_one_commit(local_env: dict[str, str]) -> None:
    clock, collection = FakeClock(), f"kv-test-{secrets.token_hex(6)}"
    store = _store(local_env, clock, collection)
    key = new_key()
    assert store.create(key, {"n": 1}, ttl_s=1) is not None
    clock.advance(2)  # expired, though the document is still there
    with pytest.raises(VersionConflict):
        store.compare_and_set(key, {"n": 2}, expected_version=1)
    assert store.create(key, {"n": 3}, ttl_s=60) is not None  # an expired document is replaced
    store.close()
