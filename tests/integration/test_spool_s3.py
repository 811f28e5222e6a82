"""The spool contract on moto's S3 server, and what is particular to the S3 adapter.

Each test gets its own bucket (``spool-test-<hex>``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from noetl_cloud.settings import Settings
from noetl_cloud.spool import SpoolBackend
from noetl_cloud.spool.s3 import S3Spool
from tests.contracts.spool import SpoolBackendContract, make_item, new_subscription


@pytest.fixture
def raw(local_env: dict[str, str]) -> Any:
    """A plain boto3 client on moto, to make buckets and look at or damage objects."""
    return boto3.client(
        "s3",
        endpoint_url=local_env["NOETL_S3_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id=local_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=local_env["AWS_SECRET_ACCESS_KEY"],
    )


@pytest.fixture
def bucket(raw: Any) -> str:
    name = f"spool-test-{secrets.token_hex(6)}"
    raw.create_bucket(Bucket=name)
    return name


def _spool(env: dict[str, str], bucket: str) -> S3Spool:
    return S3Spool(
        bucket,
        endpoint_url=env["NOETL_S3_ENDPOINT_URL"],
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


class TestS3Spool(SpoolBackendContract):
    @pytest.fixture
    def backend(self, local_env: dict[str, str], bucket: str) -> Iterator[S3Spool]:
        spool = _spool(local_env, bucket)
        yield spool
        spool.close()

    @pytest.fixture(autouse=True)
    def _raw(self, raw: Any) -> None:
        self.raw = raw

    def write_raw(self, backend: SpoolBackend, name: str, data: bytes) -> None:
        assert isinstance(backend, S3Spool)
        self.raw.put_object(Bucket=backend.bucket, Key=name, Body=data)


def test_the_object_is_one_key_whose_etag_is_the_version(local_env: dict[str, str], raw: Any, bucket: str) -> None:
    spool = _spool(local_env, bucket)
    ref = spool.put(make_item(new_subscription(), 3, b"payload"), b"payload")
    head = raw.head_object(Bucket=bucket, Key=ref.name)
    assert (head["ETag"], head["ContentLength"], head["ContentType"]) == (
        ref.version,
        ref.size,
        "application/octet-stream",
    )
    spool.close()


def test_construction_connects_to_nothing_and_from_settings_reads_the_settings() -> None:
    spool = S3Spool("b", endpoint_url="http://127.0.0.1:1")
    assert spool._client is None
    built = S3Spool.from_settings(Settings(s3_endpoint_url="http://127.0.0.1:9"), "noetl-spool")
    assert (built.bucket, built.endpoint_url) == ("noetl-spool", "http://127.0.0.1:9")
