"""The payload store on an S3 bucket (moto's server locally; SeaweedFS and other S3-compatible stores).

Uploads are create-only (``put_object(IfNoneMatch="*")``; a 412/409 means the object, with the same
content, is already there). Reads stream the body in chunks. ``boto3`` is imported on first use; nothing
connects at construction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, Final

from noetl_cloud.errors import ConfigError, NoetlError
from noetl_cloud.objectstore import s3_client
from noetl_cloud.payload.port import (
    CHUNK_BYTES,
    ObjectPayloadStore,
    PayloadError,
    PayloadNotFound,
    PayloadUnavailable,
)

_THROTTLED: Final = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"})
_MISSING: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_PRECONDITION: Final = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


class S3PayloadStore(ObjectPayloadStore):
    def __init__(
        self,
        bucket: str,
        *,
        tenant_id: str,
        organization_id: str,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(tenant_id=tenant_id, organization_id=organization_id)
        if not bucket:
            raise ConfigError("the S3 payload store needs a bucket name", code="config_missing")
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.region = region
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._client: Any = None

    def _s3(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = s3_client(
                    endpoint_url=self.endpoint_url,
                    region=self.region,
                    access_key_id=self._access_key_id,
                    secret_access_key=self._secret_access_key,
                    timeout_s=self.timeout_s,
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _exists(self, key: str) -> bool:
        with _translated(key) as client_error:
            try:
                self._s3().head_object(Bucket=self.bucket, Key=key)
            except client_error as exc:
                if _code(exc) in _MISSING or _status(exc) == 404:
                    return False
                raise
            return True

    def _upload(self, key: str, file: IO[bytes], size: int, media_type: str, metadata: Mapping[str, str]) -> None:
        with _translated(key) as client_error:
            try:
                self._s3().put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=file,
                    ContentLength=size,
                    ContentType=media_type,
                    Metadata=dict(metadata),
                    IfNoneMatch="*",
                )
            except client_error as exc:
                if _code(exc) in _PRECONDITION or _status(exc) in (409, 412):
                    return  # created meanwhile by another writer of the same bytes
                raise

    def _chunks(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        with _translated(key) as client_error:
            try:
                answer = self._s3().get_object(Bucket=self.bucket, Key=key)
            except client_error as exc:
                if _code(exc) in _MISSING or _status(exc) == 404:
                    raise PayloadNotFound(f"no payload {key}") from None
                raise
            body = answer["Body"]
            try:
                yield from body.iter_chunks(chunk_bytes)
            finally:
                body.close()

    def _delete(self, key: str) -> bool:
        if not self._exists(key):  # S3 answers a delete of a missing key with 204
            return False
        with _translated(key):
            self._s3().delete_object(Bucket=self.bucket, Key=key)
        return True


@contextmanager
def _translated(key: str) -> Iterator[Any]:
    """botocore exceptions as ours; yields ``ClientError`` for the caller's own ``except``."""
    from botocore import exceptions as bexc  # type: ignore[import-untyped]

    try:
        yield bexc.ClientError
    except NoetlError:
        raise
    except bexc.NoCredentialsError as exc:
        raise ConfigError("no AWS credentials for the S3 payload store", code="config_missing") from exc
    except (bexc.ConnectionError, bexc.HTTPClientError) as exc:
        raise PayloadUnavailable(f"s3 unavailable: {type(exc).__name__}") from exc
    except bexc.ClientError as exc:
        if _status(exc) >= 500 or _status(exc) == 429 or _code(exc) in _THROTTLED:
            raise PayloadUnavailable(f"s3 unavailable: {_code(exc)}") from exc
        raise PayloadError(f"s3 refused an operation on {key!r}: {_code(exc)}") from exc
    except bexc.BotoCoreError as exc:
        raise PayloadError(f"s3 client failed on {key!r}: {type(exc).__name__}") from exc
