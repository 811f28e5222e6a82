"""The payload store port (distributed-runtime spec §9): immutable, content-addressed payload objects.

Semantics every adapter keeps (``tests/contracts/payload.py`` proves them):

* **Content addressing.** An object's address is the sha256 of its exact bytes, scoped to a tenant and
  organization: ``noetl://tenant/<t>/org/<o>/payloads/sha256/<digest>``; the object key is the URI's path
  (``tenant/<t>/org/<o>/payloads/sha256/<digest>``). Two identical payloads share one object.
* **Exists-first, idempotent writes.** :meth:`PayloadStore.store` hashes the data, asks whether the object
  exists, and uploads only when it does not, create-only (a concurrent writer of the same bytes wins the
  race harmlessly: the content is the same). Storing the same bytes again uploads nothing.
* **Immutable.** Nothing rewrites an object; a new version is a new reference.
* **Streaming.** ``store`` accepts an iterable of chunks (spilled to a temporary file past a small memory
  budget while it is hashed, never held whole in memory); :meth:`PayloadStore.open` yields chunks.
  :meth:`PayloadStore.fetch` verifies the digest of what it read (:class:`PayloadCorrupted` otherwise).
* An outage is :class:`PayloadUnavailable` (503, retryable); a missing object :class:`PayloadNotFound`
  (404); no library exception escapes.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Final, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from noetl_cloud.errors import NoetlError, NotFound, Unavailable, ValidationFailed

OCTET_STREAM: Final = "application/octet-stream"
CHUNK_BYTES: Final = 1024 * 1024
#: Bytes of a streamed ``store`` kept in memory before the rest spills to a temporary file.
SPILL_BYTES: Final = 8 * 1024 * 1024

_SEGMENT = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_URI = re.compile(
    r"^noetl://tenant/(?P<tenant>[A-Za-z0-9._-]{1,128})/org/(?P<org>[A-Za-z0-9._-]{1,128})"
    r"/payloads/sha256/(?P<digest>[0-9a-f]{64})$"
)


class PayloadError(NoetlError):
    """A payload store refused an operation for good."""

    status = 500
    code = "payload_error"


class PayloadNotFound(NotFound):
    code = "payload_not_found"


class PayloadCorrupted(PayloadError):
    """The bytes read do not hash to the reference's digest."""

    code = "payload_digest_mismatch"


class PayloadUnavailable(Unavailable):
    code = "payload_unavailable"


class InvalidPayloadUri(ValidationFailed):
    code = "invalid_payload_uri"


class PayloadReference(BaseModel):
    """A durable reference to one immutable payload object (spec §6.3, without the Tier 1.5 hint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    media_type: str = Field(min_length=1)
    size_bytes: int = Field(ge=0)

    @property
    def key(self) -> str:
        """The object key: the URI's path."""
        return object_key(self.uri)


def payload_uri(tenant_id: str, organization_id: str, digest: str) -> str:
    """``noetl://tenant/<t>/org/<o>/payloads/sha256/<digest>``."""
    for name, value in (("tenant_id", tenant_id), ("organization_id", organization_id)):
        if not _SEGMENT.match(value):
            raise InvalidPayloadUri(f"{name} {value!r} cannot be a URI segment")
    uri = f"noetl://tenant/{tenant_id}/org/{organization_id}/payloads/sha256/{digest}"
    if not _URI.match(uri):
        raise InvalidPayloadUri(f"not a sha256 digest: {digest!r}")
    return uri


def object_key(uri: str) -> str:
    """The object key of a payload URI; :class:`InvalidPayloadUri` for anything else."""
    match = _URI.match(uri)
    if match is None:
        raise InvalidPayloadUri(f"not a payload URI: {uri[:200]!r}")
    return uri.removeprefix("noetl://")


@runtime_checkable
class PayloadStore(Protocol):
    """Immutable, content-addressed payload objects of one tenant and organization."""

    tenant_id: str
    organization_id: str

    def store(
        self, data: bytes | Iterable[bytes], media_type: str = OCTET_STREAM, metadata: Mapping[str, str] | None = None
    ) -> PayloadReference:
        """Store ``data`` (bytes, or chunks streamed) unless an object of the same digest exists; its reference."""
        ...

    def fetch(self, reference: PayloadReference) -> bytes:
        """The object's bytes, verified against ``reference.sha256`` (:class:`PayloadCorrupted` otherwise)."""
        ...

    def open(self, reference: PayloadReference, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The object's bytes as chunks, without reading it whole; the digest is checked after the last."""
        ...

    def exists(self, reference: PayloadReference) -> bool:
        """Whether the object is stored."""
        ...

    def delete(self, reference: PayloadReference) -> bool:
        """Remove the object (retention's job, never a writer's); true when it existed."""
        ...


class _Spilled:
    """A stream of chunks hashed into a spooled temporary file: digest, size and a readable file."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPILL_BYTES)
        hasher = hashlib.sha256()
        size = 0
        for chunk in chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError("payload chunks must be bytes")
            hasher.update(chunk)
            self.file.write(chunk)
            size += len(chunk)
        self.file.seek(0)
        self.digest = hasher.hexdigest()
        self.size = size

    def close(self) -> None:
        self.file.close()


class ObjectPayloadStore(ABC):
    """The port implemented once over a few object-store primitives an adapter provides."""

    def __init__(self, *, tenant_id: str, organization_id: str) -> None:
        payload_uri(tenant_id, organization_id, "0" * 64)  # validates the scope
        self.tenant_id = tenant_id
        self.organization_id = organization_id
        #: Objects this instance uploaded (a store of bytes already present uploads nothing).
        self.uploads = 0

    # -- primitives -------------------------------------------------------------------------------

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _upload(self, key: str, file: IO[bytes], size: int, media_type: str, metadata: Mapping[str, str]) -> None:
        """Create the object from ``file`` unless it exists (create-only; an existing object is success)."""

    @abstractmethod
    def _chunks(self, key: str, chunk_bytes: int) -> Iterator[bytes]:
        """The object's bytes; :class:`PayloadNotFound` when it is not stored."""

    @abstractmethod
    def _delete(self, key: str) -> bool: ...

    # -- the port ---------------------------------------------------------------------------------

    def reference(self, digest: str, media_type: str, size: int) -> PayloadReference:
        uri = payload_uri(self.tenant_id, self.organization_id, digest)
        return PayloadReference(uri=uri, sha256=digest, media_type=media_type, size_bytes=size)

    def store(
        self, data: bytes | Iterable[bytes], media_type: str = OCTET_STREAM, metadata: Mapping[str, str] | None = None
    ) -> PayloadReference:
        spilled = _Spilled([bytes(data)] if isinstance(data, bytes | bytearray | memoryview) else data)
        try:
            ref = self.reference(spilled.digest, media_type, spilled.size)
            if not self._exists(ref.key):
                meta = {"sha256": ref.sha256, **(metadata or {})}
                self._upload(ref.key, spilled.file, spilled.size, media_type, meta)
                self.uploads += 1
            return ref
        finally:
            spilled.close()

    def open(self, reference: PayloadReference, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        self._own(reference)
        hasher = hashlib.sha256()
        for chunk in self._chunks(reference.key, chunk_bytes):
            hasher.update(chunk)
            yield chunk
        if hasher.hexdigest() != reference.sha256:
            raise PayloadCorrupted(f"payload {reference.uri} does not hash to its digest")

    def fetch(self, reference: PayloadReference) -> bytes:
        return b"".join(self.open(reference))

    def exists(self, reference: PayloadReference) -> bool:
        self._own(reference)
        return self._exists(reference.key)

    def delete(self, reference: PayloadReference) -> bool:
        self._own(reference)
        return self._delete(reference.key)

    def _own(self, reference: PayloadReference) -> None:
        prefix = f"noetl://tenant/{self.tenant_id}/org/{self.organization_id}/"
        object_key(reference.uri)
        if not reference.uri.startswith(prefix) or not reference.uri.endswith(reference.sha256):
            raise InvalidPayloadUri("the reference is not a payload of this tenant and organization")


def as_reference(value: Mapping[str, Any]) -> PayloadReference:
    """A reference from its JSON form (extra fields such as ``row_count`` are ignored)."""
    fields = {k: value[k] for k in ("uri", "sha256", "media_type", "size_bytes") if k in value}
    return PayloadReference.model_validate(fields)
