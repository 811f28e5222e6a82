"""The payload store contract on fake-gcs-server, moto's S3 server and a temporary folder."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from noetl_cloud.payload import ObjectPayloadStore
from noetl_cloud.payload.bootstrap import payload_store
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
from noetl_cloud.payload.gcs import GcsPayloadStore
from noetl_cloud.payload.s3 import S3PayloadStore
from noetl_cloud.settings import Settings
from tests.contracts.payload import ORG, TENANT, PayloadStoreContract

PROJECT = "noetl-local"


class TestGcsPayloadStore(PayloadStoreContract):
    @pytest.fixture
    def store(self, local_env: dict[str, str]) -> Iterator[GcsPayloadStore]:
        self.raw = storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": local_env["STORAGE_EMULATOR_HOST"]},
        )
        bucket = f"payload-test-{secrets.token_hex(6)}"
        self.raw.create_bucket(bucket)
        store = GcsPayloadStore(
            bucket,
            tenant_id=TENANT,
            organization_id=ORG,
            endpoint=local_env["STORAGE_EMULATOR_HOST"],
            project_id=PROJECT,
        )
        yield store
        store.close()
        self.raw.close()

    def version(self, store: ObjectPayloadStore, key: str) -> str | None:
        assert isinstance(store, GcsPayloadStore)
        blob = self.raw.bucket(store.bucket_name).get_blob(key)
        return None if blob is None else str(blob.generation)

    def damage(self, store: ObjectPayloadStore, key: str, data: bytes) -> None:
        assert isinstance(store, GcsPayloadStore)
        self.raw.bucket(store.bucket_name).blob(key).upload_from_string(data)


class TestS3PayloadStore(PayloadStoreContract):
    @pytest.fixture
    def store(self, local_env: dict[str, str]) -> Iterator[S3PayloadStore]:
        credentials = {
            "aws_access_key_id": local_env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": local_env["AWS_SECRET_ACCESS_KEY"],
        }
        self.raw: Any = boto3.client(
            "s3", endpoint_url=local_env["NOETL_S3_ENDPOINT_URL"], region_name="us-east-1", **credentials
        )
        bucket = f"payload-test-{secrets.token_hex(6)}"
        self.raw.create_bucket(Bucket=bucket)
        store = S3PayloadStore(
            bucket,
            tenant_id=TENANT,
            organization_id=ORG,
            endpoint_url=local_env["NOETL_S3_ENDPOINT_URL"],
            access_key_id=credentials["aws_access_key_id"],
            secret_access_key=credentials["aws_secret_access_key"],
        )
        yield store
        store.close()

    def version(self, store: ObjectPayloadStore, key: str) -> str | None:
        assert isinstance(store, S3PayloadStore)
        try:
            head = self.raw.head_object(Bucket=store.bucket, Key=key)
        except self.raw.exceptions.ClientError:
            return None
        return f"{head['ETag']}@{head['LastModified'].isoformat()}"

    def damage(self, store: ObjectPayloadStore, key: str, data: bytes) -> None:
        assert isinstance(store, S3PayloadStore)
        self.raw.put_object(Bucket=store.bucket, Key=key, Body=data)


class TestFilesystemPayloadStore(PayloadStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FilesystemPayloadStore:
        return FilesystemPayloadStore(tmp_path, tenant_id=TENANT, organization_id=ORG)

    def version(self, store: ObjectPayloadStore, key: str) -> str | None:
        assert isinstance(store, FilesystemPayloadStore)
        path = store.root / key
        if not path.exists():
            return None
        stat = path.stat()
        return f"{stat.st_ino}@{stat.st_mtime_ns}"

    def damage(self, store: ObjectPayloadStore, key: str, data: bytes) -> None:
        assert isinstance(store, FilesystemPayloadStore)
        (store.root / key).write_bytes(data)


def test_the_settings_choose_the_adapter_and_nothing_connects(tmp_path: Path) -> None:
    assert payload_store(Settings()) is None
    fs = payload_store(Settings(payload_backend="filesystem", payload_dir=str(tmp_path), tenant_id="a"))
    assert isinstance(fs, FilesystemPayloadStore) and fs.tenant_id == "a"
    gcs = payload_store(Settings(payload_backend="gcs", payload_bucket="b", storage_emulator_host="http://x:1"))
    assert isinstance(gcs, GcsPayloadStore) and gcs._client is None and gcs.endpoint == "http://x:1"
    s3 = payload_store(Settings(payload_backend="s3", payload_bucket="b", s3_endpoint_url="http://y:2"))
    assert isinstance(s3, S3PayloadStore) and s3._client is None
