"""Google Cloud Storage spool backend (RFC §8.2 ``gcs``); the fake-gcs-server emulator locally.

One object per item in one bucket, named as :mod:`noetl_cloud.spool.item` says, content type
``application/octet-stream``. The version of a reference is the object's generation.

* create-only: upload with ``if_generation_match=0`` (a 412 is :class:`SpoolItemExists`);
* rewrite (``update_attempts``): upload with ``if_generation_match=<generation>``;
* delete: the generation is read first (absent: ``False``; another one: conflict), then the
  delete is sent with ``if_generation_match=<generation>``. Real GCS enforces that precondition;
  fake-gcs-server ignores it on deletes, so there only the read-before check protects (racy).

Nothing connects at import or construction: the client is created on first use. With
``endpoint`` (the emulator's URL, e.g. ``http://127.0.0.1:4443``) the client uses it with
anonymous credentials; otherwise application default credentials and the real API. The
adapter does not read the environment itself.

Errors: an outage (5xx, 429, timeouts, connection failures) is
:class:`~noetl_cloud.errors.Unavailable` (``spool_unavailable``); any other refusal
:class:`~noetl_cloud.spool.item.SpoolError`; missing credentials :class:`~noetl_cloud.errors.ConfigError`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[attr-defined,import-untyped]
from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

from noetl_cloud.errors import ConfigError, NoetlError, Unavailable
from noetl_cloud.objectstore import GCS_OUTAGE, gcs_client
from noetl_cloud.settings import Settings
from noetl_cloud.spool.item import DLQ, SpoolError, SpoolItemExists, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.port import ObjectSpool

CONTENT_TYPE: Final = "application/octet-stream"

_OUTAGE: Final = GCS_OUTAGE


class GcsSpool(ObjectSpool):
    """The spool port on one GCS bucket."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint: str | None = None,
        project_id: str | None = None,
        timeout_s: float = 20.0,
    ) -> None:
        if not bucket:
            raise ConfigError("the GCS spool needs a bucket name", code="config_missing")
        self.bucket_name = bucket
        self.endpoint = endpoint
        self.project_id = project_id
        self.timeout_s = timeout_s
        self._retry = DEFAULT_RETRY.with_timeout(timeout_s)
        self._client_lock = threading.Lock()
        self._client: storage.Client | None = None

    @classmethod
    def from_settings(cls, settings: Settings, bucket: str) -> GcsSpool:
        """The spool of a deployment: ``STORAGE_EMULATOR_HOST`` when set, ``NOETL_PROJECT_ID``."""
        return cls(bucket, endpoint=settings.storage_emulator_host, project_id=settings.project_id)

    # -- the client ------------------------------------------------------------------------------

    def _storage(self) -> storage.Client:
        with self._client_lock:
            if self._client is None:
                with _translated("(client)"):
                    self._client = self._connect()
            return self._client

    def _connect(self) -> storage.Client:
        return gcs_client(self.endpoint, self.project_id)

    def _bucket(self) -> Any:
        return self._storage().bucket(self.bucket_name)

    def close(self) -> None:
        """Drop the client (a later call creates a new one)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- primitives ------------------------------------------------------------------------------

    def _ref(self, blob: Any) -> SpoolRef:
        return SpoolRef(name=blob.name, version=str(blob.generation), size=int(blob.size or 0))

    def _upload(self, name: str, data: bytes, generation: int) -> SpoolRef:
        blob = self._bucket().blob(name)
        if _dead_lettered(name):
            # The bucket's lifecycle deletes dead letters by days since customTime; live items carry none.
            blob.custom_time = datetime.now(UTC)
        blob.upload_from_string(
            data,
            content_type=CONTENT_TYPE,
            if_generation_match=generation,
            retry=self._retry,
            timeout=self.timeout_s,
        )
        return SpoolRef(name=name, version=str(blob.generation), size=len(data))

    def _create(self, name: str, data: bytes) -> SpoolRef:
        with _translated(name):
            try:
                return self._upload(name, data, 0)
            except gexc.PreconditionFailed:
                raise SpoolItemExists(name) from None

    def _generation(self, name: str) -> int | None:
        blob = self._bucket().get_blob(name, retry=self._retry, timeout=self.timeout_s)
        return None if blob is None else int(blob.generation)

    def _expect(self, ref: SpoolRef) -> int:
        actual = self._generation(ref.name)
        if actual is None:
            raise SpoolItemNotFound(ref.name)
        if ref.version is not None and str(actual) != ref.version:
            raise SpoolVersionConflict(ref.name, ref.version, str(actual))
        return actual

    def _replace(self, ref: SpoolRef, data: bytes) -> SpoolRef:
        with _translated(ref.name):
            generation = int(ref.version) if ref.version is not None else self._expect(ref)
            try:
                return self._upload(ref.name, data, generation)
            except gexc.PreconditionFailed:
                self._expect(ref)  # raises not-found or conflict
                raise SpoolVersionConflict(ref.name, ref.version) from None

    def _read(self, name: str) -> tuple[SpoolRef, bytes]:
        with _translated(name):
            blob = self._bucket().get_blob(name, retry=self._retry, timeout=self.timeout_s)
            if blob is None:
                raise SpoolItemNotFound(name)
            try:
                data = blob.download_as_bytes(
                    if_generation_match=blob.generation, retry=self._retry, timeout=self.timeout_s
                )
            except (gexc.NotFound, gexc.PreconditionFailed):  # deleted or rewritten between the two calls
                return self._read(name)
            return SpoolRef(name=name, version=str(blob.generation), size=len(data)), data

    def _list(self, prefix: str, limit: int | None) -> list[SpoolRef]:
        with _translated(prefix):
            blobs = self._storage().list_blobs(
                self.bucket_name, prefix=prefix, max_results=limit, retry=self._retry, timeout=self.timeout_s
            )
            return sorted((self._ref(blob) for blob in blobs), key=lambda ref: ref.name)

    def _children(self, prefix: str) -> list[str]:
        with _translated(prefix):
            iterator = self._storage().list_blobs(
                self.bucket_name, prefix=prefix, delimiter="/", retry=self._retry, timeout=self.timeout_s
            )
            for _page in iterator.pages:
                pass
            return sorted(p[len(prefix) :].rstrip("/") for p in iterator.prefixes)

    def _delete(self, ref: SpoolRef) -> bool:
        with _translated(ref.name):
            try:
                generation = self._expect(ref)
            except SpoolItemNotFound:
                return False
            try:
                self._bucket().blob(ref.name).delete(
                    if_generation_match=generation, retry=self._retry, timeout=self.timeout_s
                )
            except gexc.NotFound:
                return False
            except gexc.PreconditionFailed:
                raise SpoolVersionConflict(ref.name, ref.version) from None
            return True


def _dead_lettered(name: str) -> bool:
    """``<subscription>/dlq/...``: a lane literally named ``dlq`` is encoded, so this is exact."""
    parts = name.split("/")
    return len(parts) > 2 and parts[1] == DLQ


@contextmanager
def _translated(name: str) -> Iterator[None]:
    """Google and transport exceptions as ours."""
    try:
        yield
    except NoetlError:
        raise
    except _OUTAGE as exc:
        raise Unavailable(f"gcs unavailable: {type(exc).__name__}", code="spool_unavailable") from exc
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigError("no Google credentials for the GCS spool", code="config_missing") from exc
    except (gexc.GoogleAPICallError, auth_exc.GoogleAuthError) as exc:
        raise SpoolError(f"gcs refused an operation on {name!r}: {type(exc).__name__}") from exc
