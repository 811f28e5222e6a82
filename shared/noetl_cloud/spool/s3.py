"""S3 spool backend (RFC §8.2 ``s3``); moto's server locally.

One object per item in one bucket, named as :mod:`noetl_cloud.spool.item` says. The version of a
reference is the object's ETag. S3 conditional writes are used (moto's server honours them):

* create-only: ``put_object(IfNoneMatch="*")`` (412 / 409 is :class:`SpoolItemExists`);
* rewrite (``update_attempts``): ``put_object(IfMatch=<etag>)``;
* delete: ``head_object`` first (absent: ``False``; another ETag: conflict; S3 answers a delete
  of a missing key with 204, so the head is what tells), then ``delete_object(IfMatch=<etag>)``.

``boto3`` is imported lazily, on first use: it is not yet among the runtime dependencies.
Nothing connects at construction. ``endpoint_url`` (moto's URL locally) and credentials are
passed in; without credentials boto3's own default chain applies. The adapter does not read
the environment itself.

Errors: an outage (5xx, throttling, timeouts, connection failures) is
:class:`~noetl_cloud.errors.Unavailable` (``spool_unavailable``); any other refusal
:class:`~noetl_cloud.spool.item.SpoolError`; no credentials :class:`~noetl_cloud.errors.ConfigError`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from noetl_cloud.errors import ConfigError, NoetlError, Unavailable
from noetl_cloud.objectstore import s3_client
from noetl_cloud.settings import Settings
from noetl_cloud.spool.item import SpoolError, SpoolItemExists, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.port import ObjectSpool

CONTENT_TYPE: Final = "application/octet-stream"
_THROTTLED: Final = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"})
_MISSING: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_PRECONDITION: Final = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


class S3Spool(ObjectSpool):
    """The spool port on one S3 bucket."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        timeout_s: float = 20.0,
    ) -> None:
        if not bucket:
            raise ConfigError("the S3 spool needs a bucket name", code="config_missing")
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.region = region
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self.timeout_s = timeout_s
        self._client_lock = threading.Lock()
        self._client: Any = None

    @classmethod
    def from_settings(cls, settings: Settings, bucket: str) -> S3Spool:
        """The spool of a deployment: ``NOETL_S3_ENDPOINT_URL`` when set (credentials: boto3's chain)."""
        return cls(bucket, endpoint_url=settings.s3_endpoint_url)

    def _s3(self) -> Any:
        with self._client_lock:
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
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- primitives ------------------------------------------------------------------------------

    def _put(self, name: str, data: bytes, **condition: str) -> SpoolRef:
        answer = self._s3().put_object(Bucket=self.bucket, Key=name, Body=data, ContentType=CONTENT_TYPE, **condition)
        return SpoolRef(name=name, version=str(answer["ETag"]), size=len(data))

    def _create(self, name: str, data: bytes) -> SpoolRef:
        with _translated(name) as client_error:
            try:
                return self._put(name, data, IfNoneMatch="*")
            except client_error as exc:
                if _code(exc) in _PRECONDITION or _status(exc) in (409, 412):
                    raise SpoolItemExists(name) from None
                raise

    def _etag(self, name: str) -> str | None:
        with _translated(name) as client_error:
            try:
                return str(self._s3().head_object(Bucket=self.bucket, Key=name)["ETag"])
            except client_error as exc:
                if _code(exc) in _MISSING or _status(exc) == 404:
                    return None
                raise

    def _expect(self, ref: SpoolRef) -> str:
        actual = self._etag(ref.name)
        if actual is None:
            raise SpoolItemNotFound(ref.name)
        if ref.version is not None and actual != ref.version:
            raise SpoolVersionConflict(ref.name, ref.version, actual)
        return actual

    def _replace(self, ref: SpoolRef, data: bytes) -> SpoolRef:
        etag = ref.version if ref.version is not None else self._expect(ref)
        with _translated(ref.name) as client_error:
            try:
                return self._put(ref.name, data, IfMatch=etag)
            except client_error as exc:
                if _code(exc) in _PRECONDITION | _MISSING or _status(exc) in (404, 409, 412):
                    self._expect(ref)  # raises not-found or conflict
                    raise SpoolVersionConflict(ref.name, ref.version) from None
                raise

    def _read(self, name: str) -> tuple[SpoolRef, bytes]:
        with _translated(name) as client_error:
            try:
                answer = self._s3().get_object(Bucket=self.bucket, Key=name)
            except client_error as exc:
                if _code(exc) in _MISSING or _status(exc) == 404:
                    raise SpoolItemNotFound(name) from None
                raise
            data = answer["Body"].read()
            return SpoolRef(name=name, version=str(answer["ETag"]), size=len(data)), data

    def _pages(self, **arguments: Any) -> Iterator[dict[str, Any]]:
        paginator = self._s3().get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, **arguments)

    def _list(self, prefix: str, limit: int | None) -> list[SpoolRef]:
        found: list[SpoolRef] = []
        with _translated(prefix):
            for page in self._pages(Prefix=prefix):
                for entry in page.get("Contents", []):
                    found.append(SpoolRef(name=entry["Key"], version=str(entry["ETag"]), size=int(entry["Size"])))
                    if limit is not None and len(found) >= limit:
                        return found
        return found

    def _children(self, prefix: str) -> list[str]:
        with _translated(prefix):
            prefixes = [
                p["Prefix"]
                for page in self._pages(Prefix=prefix, Delimiter="/")
                for p in page.get("CommonPrefixes", [])
            ]
        return sorted(p[len(prefix) :].rstrip("/") for p in prefixes)

    def _delete(self, ref: SpoolRef) -> bool:
        try:
            etag = self._expect(ref)
        except SpoolItemNotFound:
            return False
        with _translated(ref.name) as client_error:
            try:
                self._s3().delete_object(Bucket=self.bucket, Key=ref.name, IfMatch=etag)
            except client_error as exc:
                if _code(exc) in _MISSING or _status(exc) == 404:
                    return False
                if _code(exc) in _PRECONDITION or _status(exc) == 412:
                    raise SpoolVersionConflict(ref.name, ref.version) from None
                raise
            return True


@contextmanager
def _translated(name: str) -> Iterator[Any]:
    """botocore exceptions as ours; yields ``ClientError`` for the caller's own ``except``."""
    from botocore import exceptions as bexc  # type: ignore[import-untyped]

    try:
        yield bexc.ClientError
    except NoetlError:
        raise
    except bexc.NoCredentialsError as exc:
        raise ConfigError("no AWS credentials for the S3 spool", code="config_missing") from exc
    except (bexc.ConnectionError, bexc.HTTPClientError) as exc:
        raise Unavailable(f"s3 unavailable: {type(exc).__name__}", code="spool_unavailable") from exc
    except bexc.ClientError as exc:
        if _status(exc) >= 500 or _status(exc) == 429 or _code(exc) in _THROTTLED:
            raise Unavailable(f"s3 unavailable: {_code(exc)}", code="spool_unavailable") from exc
        raise SpoolError(f"s3 refused an operation on {name!r}: {_code(exc)}") from exc
    except bexc.BotoCoreError as exc:
        raise SpoolError(f"s3 client failed on {name!r}: {type(exc).__name__}") from exc
