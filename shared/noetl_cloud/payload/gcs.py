"""The payload store on a Google Cloud Storage bucket (fake-gcs-server locally).

Uploads are create-only (``if_generation_match=0``; a 412 means the object, with the same content, is
already there). Reads stream through the client's blob reader. Nothing connects at construction; with
``endpoint`` (the emulator's URL) the client uses it with anonymous credentials.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, Final

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[attr-defined,import-untyped]
from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

from noetl_cloud.errors import ConfigError, NoetlError
from noetl_cloud.objectstore import GCS_OUTAGE, gcs_client
from noetl_cloud.payload.port import (
    CHUNK_BYTES,
    ObjectPayloadStore,
    PayloadError,
    PayloadNotFound,
    PayloadUnavailable,
)

_OUTAGE: Final = GCS_OUTAGE


class GcsPayloadStore(ObjectPayloadStore):
    def __init__(
        self,
        bucket: str,
        *,
        tenant_id: str,
        organization_id: str,
        endpoint: str | None = None,
        project_id: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(tenant_id=tenant_id, organization_id=organization_id)
        if not bucket:
            raise ConfigError("the GCS payload store needs a bucket name", code="config_missing")
        self.bucket_name = bucket
        self.endpoint = endpoint
        self.project_id = project_id
        self.timeout_s = timeout_s
        self._retry = DEFAULT_RETRY.with_timeout(timeout_s)
        self._lock = threading.Lock()
        self._client: storage.Client | None = None

    def _storage(self) -> storage.Client:
        with self._lock:
            if self._client is None:
                with _translated("(client)"):
                    self._client = gcs_client(self.endpoint, self.project_id)
            return self._client

    def _blob(self, key: str) -> Any:
        return self._storage().bucket(self.bucket_name).blob(key)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _exists(self, key: str) -> bool:
        with _translated(key):
            return bool(self._blob(key).exists(retry=self._retry, timeout=self.timeout_s))

    def _upload(self, key: str, file: IO[bytes], size: int, media_type: str, metadata: Mapping[str, str]) -> None:
        with _translated(key):
            blob = self._blob(key)
            blob.metadata = dict(metadata)
            try:
                blob.upload_from_file(
                    file,
                    size=size,
                    content_type=media_type,
                    if_generation_match=0,
                    retry=self._retry,
                    timeout=self.timeout_s,
                )
            except gexc.PreconditionFailed:
                pass  # created meanwhile by another writer of the same bytes

    def _chunks(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        with _translated(key):
            try:
                reader = self._blob(key).open("rb", chunk_size=max(chunk_bytes, 256 * 1024), retry=self._retry)
            except gexc.NotFound:
                raise PayloadNotFound(f"no payload {key}") from None
            try:
                with reader:
                    while chunk := reader.read(chunk_bytes):
                        yield chunk
            except gexc.NotFound:
                raise PayloadNotFound(f"no payload {key}") from None

    def _delete(self, key: str) -> bool:
        with _translated(key):
            try:
                self._blob(key).delete(retry=self._retry, timeout=self.timeout_s)
            except gexc.NotFound:
                return False
            return True


@contextmanager
def _translated(key: str) -> Iterator[None]:
    try:
        yield
    except NoetlError:
        raise
    except _OUTAGE as exc:
        raise PayloadUnavailable(f"gcs unavailable: {type(exc).__name__}") from exc
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigError("no Google credentials for the GCS payload store", code="config_missing") from exc
    except (gexc.GoogleAPICallError, auth_exc.GoogleAuthError) as exc:
        raise PayloadError(f"gcs refused an operation on {key!r}: {type(exc).__name__}") from exc
