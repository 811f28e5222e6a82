"""The canonical event envelope (distributed-runtime spec §3.1), canonical JSON and checksums.

Canonical JSON is the one byte form every checksum in the system is taken over:

* keys sorted, separators ``,`` and ``:`` with no spaces, UTF-8 (no ``\\u`` escapes for text);
* timestamps in UTC as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (always six fraction digits);
* no NaN or infinity (they are not JSON);
* ids (snowflakes) as decimal strings.

``envelope_checksum`` is the sha256 of the canonical JSON of every envelope field except the
checksum itself. The event store seals an envelope (assigns its stream version, ingest time and
checksum) when it appends it, so the checksum covers exactly what is stored.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

CANONICAL_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(value: datetime) -> str:
    """Canonical text of a timestamp; a naive datetime is refused rather than guessed."""
    if value.tzinfo is None:
        raise ValueError("naive datetime: every timestamp must carry a time zone")
    return value.astimezone(UTC).strftime(CANONICAL_TIME_FORMAT)


def parse_time(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    else:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without time zone: {value!r}")
    return parsed.astimezone(UTC)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, bytes):
        raise TypeError("bytes are not JSON: store them in the payload store and reference them")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    )


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def checksum(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))


def default_schema_name(event_type: str) -> str:
    """The schema name an event of ``event_type`` gets unless its producer names another (``noetl.<type>``).

    The event store leaves a default schema name out of the stored row (it is rebuilt from the type)."""
    return f"noetl.{event_type}"


class PayloadRef(BaseModel):
    """A reference to an immutable, content-addressed payload object."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    media_type: str = Field(min_length=1)
    size_bytes: int | None = Field(default=None, ge=0)


class EventEnvelope(BaseModel):
    """One event as the event store holds it.

    ``payload`` is the small inline body of the event (scalars, patches, references; never
    rows); anything large travels by ``payload_ref``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(pattern=r"^[0-9]{1,19}$")
    tenant_id: str = Field(min_length=1)
    organization_id: str = Field(min_length=1)
    execution_id: str | None = Field(default=None, pattern=r"^[0-9]{1,19}$")
    stream_id: str = Field(min_length=1, max_length=512)
    stream_version: int = Field(default=0, ge=0)
    aggregate_id: str = Field(min_length=1)
    aggregate_type: str = Field(min_length=1)
    event_type: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
    schema_name: str = Field(min_length=1)
    schema_version: int = Field(default=1, ge=1)
    event_time: datetime
    ingest_time: datetime | None = None
    producer: str = Field(min_length=1)
    causation_id: str | None = None
    correlation_id: str | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=512)
    payload: dict[str, Any] = Field(default_factory=dict)
    payload_ref: PayloadRef | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    envelope_checksum: str | None = None

    @field_validator("event_time", "ingest_time")
    @classmethod
    def _aware_utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must carry a time zone")
        return value.astimezone(UTC)

    @field_serializer("event_time", "ingest_time")
    def _serialize_time(self, value: datetime | None) -> str | None:
        return None if value is None else format_time(value)

    def canonical_fields(self) -> dict[str, Any]:
        """Every field but the checksum, in JSON form."""
        return self.model_dump(mode="json", exclude={"envelope_checksum"})

    def compute_checksum(self) -> str:
        return checksum(self.canonical_fields())

    def sealed(self, *, stream_version: int, ingest_time: datetime) -> EventEnvelope:
        """The envelope as stored: its stream version, ingest time and checksum set.

        The checksum is taken over this envelope's canonical fields with the two stored values put
        in (what :meth:`compute_checksum` of the sealed copy returns), so one copy is made, not two.
        """
        ingest = ingest_time.astimezone(UTC)
        fields = self.canonical_fields()
        fields["stream_version"] = stream_version
        fields["ingest_time"] = format_time(ingest)
        return self.model_copy(
            update={"stream_version": stream_version, "ingest_time": ingest, "envelope_checksum": checksum(fields)}
        )

    def verify_checksum(self) -> bool:
        return self.envelope_checksum is not None and self.envelope_checksum == self.compute_checksum()

    def to_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))


class EventFactory:
    """Mints draft envelopes for one producer: ids, tenant scope, times and schema names filled.

    ``schema_name`` defaults to ``noetl.<event_type>``; the store seals the draft on append.
    """

    def __init__(self, *, tenant_id: str, organization_id: str, producer: str, next_id: Any) -> None:
        self.tenant_id = tenant_id
        self.organization_id = organization_id
        self.producer = producer
        self._next_id = next_id

    def new(
        self,
        event_type: str,
        *,
        stream_id: str,
        aggregate_type: str,
        aggregate_id: str,
        execution_id: str | None = None,
        payload: dict[str, Any] | None = None,
        payload_ref: PayloadRef | None = None,
        meta: dict[str, Any] | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        idempotency_key: str | None = None,
        schema_version: int = 1,
        event_time: datetime | None = None,
    ) -> EventEnvelope:
        return EventEnvelope(
            event_id=str(self._next_id()),
            tenant_id=self.tenant_id,
            organization_id=self.organization_id,
            execution_id=execution_id,
            stream_id=stream_id,
            aggregate_id=aggregate_id,
            aggregate_type=aggregate_type,
            event_type=event_type,
            schema_name=default_schema_name(event_type),
            schema_version=schema_version,
            event_time=event_time or utc_now(),
            producer=self.producer,
            causation_id=causation_id,
            correlation_id=correlation_id if correlation_id is not None else execution_id,
            idempotency_key=idempotency_key,
            payload=payload or {},
            payload_ref=payload_ref,
            meta=meta or {},
        )
