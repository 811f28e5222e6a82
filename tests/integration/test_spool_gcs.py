"""The spool contract on fake-gcs-server, and what is particular to the GCS adapter.

Each test gets its own bucket (``spool-test-<hex>``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from noetl_cloud.settings import Settings
from noetl_cloud.spool import SpoolBackend
from noetl_cloud.spool.gcs import GcsSpool
from tests.contracts.spool import SpoolBackendContract, make_item, new_subscription

PROJECT = "noetl-local"


@pytest.fixture
def raw(local_env: dict[str, str]) -> Iterator[storage.Client]:
    """A plain client on the emulator, to make buckets and look at or damage objects."""
    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": local_env["STORAGE_EMULATOR_HOST"]},
    )
    yield client
    client.close()


@pytest.fixture
def bucket(raw: storage.Client) -> str:
    name = f"spool-test-{secrets.token_hex(6)}"
    raw.create_bucket(name)
    return name


class TestGcsSpool(SpoolBackendContract):
    @pytest.fixture
    def backend(self, local_env: dict[str, str], bucket: str) -> Iterator[GcsSpool]:
        spool = GcsSpool(bucket, endpoint=local_env["STORAGE_EMULATOR_HOST"], project_id=PROJECT)
        yield spool
        spool.close()

    @pytest.fixture(autouse=True)
    def _raw(self, raw: storage.Client) -> None:
        self.raw = raw

    def write_raw(self, backend: SpoolBackend, name: str, data: bytes) -> None:
        assert isinstance(backend, GcsSpool)
        self.raw.bucket(backend.bucket_name).blob(name).upload_from_string(data)


def test_the_object_is_one_blob_whose_generation_is_the_version(
    local_env: dict[str, str], raw: storage.Client, bucket: str
) -> None:
    spool = GcsSpool(bucket, endpoint=local_env["STORAGE_EMULATOR_HOST"], project_id=PROJECT)
    sub = new_subscription()
    ref = spool.put(make_item(sub, 3, b"payload"), b"payload")
    blob = raw.bucket(bucket).get_blob(ref.name)
    assert blob is not None and str(blob.generation) == ref.version and blob.size == ref.size
    assert blob.content_type == "application/octet-stream"
    assert blob.download_as_bytes().endswith(b"\npayload")
    spool.close()


def test_only_dead_letters_carry_the_custom_time_the_bucket_lifecycle_deletes_by(
    local_env: dict[str, str], raw: storage.Client, bucket: str
) -> None:
    spool = GcsSpool(bucket, endpoint=local_env["STORAGE_EMULATOR_HOST"], project_id=PROJECT)
    sub = new_subscription()
    live = spool.put(make_item(sub, 1, b"one"), b"one")
    dead = spool.move_to_dlq(spool.put(make_item(sub, 2, b"two"), b"two"), "max_replay_attempts")
    assert raw.bucket(bucket).get_blob(live.name).custom_time is None
    assert raw.bucket(bucket).get_blob(dead.name).custom_time is not None
    spool.close()


def test_construction_connects_to_nothing_and_from_settings_reads_the_settings() -> None:
    spool = GcsSpool("b", endpoint="http://127.0.0.1:1")
    assert spool._client is None
    built = GcsSpool.from_settings(
        Settings(project_id="proj", storage_emulator_host="http://127.0.0.1:9"), "noetl-spool"
    )
    assert (built.bucket_name, built.endpoint, built.project_id) == ("noetl-spool", "http://127.0.0.1:9", "proj")
