"""One spooled message: its record, the name of its object, and the object's bytes.

**Names.** ``<subscription>/<lane>/<recv_seq, 20 digits>-<message id>`` for a live item and
``<subscription>/dlq/<lane>/<recv_seq>-<message id>`` for a dead-lettered one. Each segment is
percent-encoded (UTF-8, nothing left unescaped but ``A-Z a-z 0-9 _ -``), so a ``/``, a space, a
``.`` or any unicode in a subscription, lane or message id can neither add a level nor escape the
prefix, every name is ASCII, and the segment decodes back exactly. A lane literally named ``dlq``
is written ``%64lq`` so it cannot meet the dead-letter prefix. The zero-padded ``recv_seq`` makes
name order receive order within a lane (object stores list in name order). A message id whose
encoding is longer than :data:`MAX_ID_CHARS` is named by ``~`` + the first 32 hex digits of its
sha256 instead (the item keeps the real id; ``~`` never appears in an encoded id); subscriptions
and lanes longer than :data:`MAX_SEGMENT_CHARS` encoded are refused.

**Object bytes.** One line of compact JSON (the header: the item's fields plus ``"v": 1`` and
``"payload_bytes"``), a ``\\n``, then the exact payload bytes. JSON never contains a raw newline,
so the first ``\\n`` ends the header; the payload is stored as it came, with no base64 overhead.
Reading checks the format, the length and the sha256 of the payload; any mismatch is
:class:`SpoolItemCorrupted`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final
from urllib.parse import quote, unquote

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from noetl_cloud.errors import Conflict, NoetlError, NotFound

FORMAT_VERSION: Final = 1
SEQ_DIGITS: Final = 20
MAX_RECV_SEQ: Final = 10**SEQ_DIGITS - 1
DLQ: Final = "dlq"
MAX_SEGMENT_CHARS: Final = 200
MAX_ID_CHARS: Final = 160
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^(?P<seq>[0-9]{20})-(?P<id>[A-Za-z0-9_%~-]+)$")


# -- errors --------------------------------------------------------------------------------------


class SpoolError(NoetlError):
    """The spool backend refused an operation for a reason retrying will not fix.

    An outage of the backend is :class:`~noetl_cloud.errors.Unavailable` instead (retryable).
    """

    code = "spool_error"


class SpoolItemExists(Conflict):
    """An object of that name is already spooled (create-only write); a retried put lands here."""

    code = "spool_item_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"spool item {name!r} already exists", details={"name": name})
        self.name = name


class SpoolItemNotFound(NotFound):
    """No spooled object has that name (any more)."""

    code = "spool_item_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"spool item {name!r} not found", details={"name": name})
        self.name = name


class SpoolVersionConflict(Conflict):
    """The object was rewritten since the reference was taken (generation / ETag / version differs)."""

    code = "spool_version_conflict"

    def __init__(self, name: str, expected: str | None, actual: str | None = None) -> None:
        super().__init__(
            f"spool item {name!r} is not at version {expected!r}",
            details={"name": name, "expected_version": expected, "actual_version": actual},
        )
        self.name = name
        self.expected = expected
        self.actual = actual


class SpoolItemCorrupted(NoetlError):
    """A stored object is not a spool item or its payload does not match its sha256 (never retried)."""

    status = 500
    code = "spool_item_corrupted"


# -- the item ------------------------------------------------------------------------------------


def payload_sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


class SpoolItem(BaseModel):
    """What is recorded with one spooled message (RFC §8.2), so a replay needs nothing else.

    ``plan`` is the verified dispatch plan (``DispatchPlan.to_dict()``: route, pool, trace,
    dedup): replay dispatches from it and never re-reads the message's untrusted headers.
    ``lane`` is the ordering lane the spool engine chose (the ordering key under ``per_key``, one
    fixed lane under ``global``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    subscription: str = Field(min_length=1)
    lane: str = Field(min_length=1)
    source: str
    message_id: str = Field(min_length=1)
    idempotency_key: str | None = None
    recv_seq: Annotated[int, Field(ge=0, le=MAX_RECV_SEQ)]
    ordering_key: str | None = None
    sha256: str
    payload_bytes: Annotated[int, Field(ge=0)]
    attempts: Annotated[int, Field(ge=0)] = 0
    spooled_at: AwareDatetime
    reason: str
    plan: dict[str, Any]
    dlq_reason: str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return value

    @field_validator("spooled_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    @classmethod
    def for_payload(cls, payload: bytes, **fields: Any) -> SpoolItem:
        """An item describing ``payload``: its sha256 and length computed here."""
        return cls(sha256=payload_sha256(payload), payload_bytes=len(payload), **fields)

    def listing(self, name: str, *, dead: bool) -> dict[str, Any]:
        """The row an operator sees for this item stored as ``name`` (the CLI's and the API's listings):
        metadata only, never the payload; ``reason`` is the dead-letter reason of a ``dead`` item."""
        return {
            "name": name,
            "lane": self.lane,
            "recv_seq": str(self.recv_seq),
            "message_id": self.message_id,
            "attempts": self.attempts,
            "bytes": self.payload_bytes,
            "spooled_at": self.spooled_at.isoformat(),
            "reason": self.dlq_reason if dead else self.reason,
        }

    def matches(self, payload: bytes) -> bool:
        return len(payload) == self.payload_bytes and payload_sha256(payload) == self.sha256


@dataclass(frozen=True)
class SpoolRef:
    """A stored object: its name, the backend's version of it, and its size in bytes.

    ``version`` is the GCS generation, the S3 ETag, a file's inode and mtime, a counter in memory:
    deletes and rewrites are conditioned on it. ``None`` means "whatever version is there".
    """

    name: str
    version: str | None
    size: int


# -- names ---------------------------------------------------------------------------------------


def encode_segment(text: str) -> str:
    """Percent-encode one name segment: only ``A-Z a-z 0-9 _ -`` stay as they are."""
    return quote(text, safe="").replace(".", "%2E").replace("~", "%7E")


def _segment(text: str, what: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"a spool {what} must be a non-empty string")
    encoded = encode_segment(text)
    if len(encoded) > MAX_SEGMENT_CHARS:
        raise ValueError(f"a spool {what} may be at most {MAX_SEGMENT_CHARS} characters once encoded")
    return encoded


def subscription_prefix(subscription: str) -> str:
    """``<subscription>/``: every object of one subscription, live and dead-lettered."""
    return _segment(subscription, "subscription") + "/"


def lane_segment(lane: str) -> str:
    encoded = _segment(lane, "lane")
    return "%64lq" if encoded == DLQ else encoded


def lane_prefix(subscription: str, lane: str, *, dlq: bool = False) -> str:
    """``<subscription>/<lane>/`` or ``<subscription>/dlq/<lane>/``."""
    return subscription_prefix(subscription) + (DLQ + "/" if dlq else "") + lane_segment(lane) + "/"


def dlq_prefix(subscription: str) -> str:
    return subscription_prefix(subscription) + DLQ + "/"


def decode_lane(segment: str) -> str:
    return unquote(segment, errors="strict")


def message_segment(message_id: str) -> str:
    encoded = encode_segment(message_id)
    if len(encoded) > MAX_ID_CHARS:
        return "~" + hashlib.sha256(message_id.encode()).hexdigest()[:32]
    return encoded


def object_name(item: SpoolItem, *, dlq: bool = False) -> str:
    """The name of ``item``'s object (live, or under the dead-letter prefix)."""
    leaf = f"{item.recv_seq:0{SEQ_DIGITS}d}-{message_segment(item.message_id)}"
    return lane_prefix(item.subscription, item.lane, dlq=dlq) + leaf


def is_item_leaf(leaf: str) -> bool:
    """Whether the last segment of a name is ``<recv_seq>-<message id>`` (other objects are ignored)."""
    return _NAME.match(leaf) is not None


# -- object bytes --------------------------------------------------------------------------------


def encode_object(item: SpoolItem, payload: bytes) -> bytes:
    """The object's bytes: the JSON header line, ``\\n``, the payload. Refuses a payload the item does not describe."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"a spool payload must be bytes, not {type(payload).__name__}")
    payload = bytes(payload)
    if not item.matches(payload):
        raise ValueError("the payload does not match the item's sha256 and payload_bytes")
    header = {"v": FORMAT_VERSION, **item.model_dump(mode="json")}
    line = json.dumps(header, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True)
    return line.encode() + b"\n" + payload


def decode_object(name: str, data: bytes) -> tuple[SpoolItem, bytes]:
    """The item and exact payload an object holds; :class:`SpoolItemCorrupted` when they do not agree."""
    end = data.find(b"\n")
    if end < 0:
        raise SpoolItemCorrupted(f"spool object {name!r} has no header", details={"name": name})
    try:
        header = json.loads(data[:end])
        if not isinstance(header, dict) or header.pop("v", None) != FORMAT_VERSION:
            raise ValueError("not a version 1 spool header")
        item = SpoolItem.model_validate(header)
    except (ValueError, ValidationError) as exc:
        raise SpoolItemCorrupted(f"spool object {name!r} has an unreadable header", details={"name": name}) from exc
    payload = data[end + 1 :]
    if not item.matches(payload):
        raise SpoolItemCorrupted(
            f"spool object {name!r}: payload does not match its sha256",
            code="spool_checksum_mismatch",
            details={"name": name, "sha256": item.sha256, "actual_sha256": payload_sha256(payload)},
        )
    return item, payload
