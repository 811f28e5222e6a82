"""The ``spool`` block of a Subscription (subscription-listener RFC §8): store-and-forward while the
downstream is down, its circuit breaker, retention and drain.

Its own module so that the spool engine, which the public ingress runs on every delivery, loads these
four models and not the whole Subscription document's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from noetl_cloud.spec.common import ByteCount, SpecModel, WalletAlias


class Circuit(SpecModel):
    """The downstream circuit breaker: opens after ``trip_after`` failures, probes after ``probe_after_ms``."""

    trip_after: int = Field(default=5, ge=1, le=1000)
    probe_after_ms: int = Field(default=30_000, ge=100, le=86_400_000)


class Retention(SpecModel):
    """The spool's ceiling and what happens when it is reached."""

    max_age_hours: int = Field(default=72, ge=1, le=24 * 365)
    max_bytes: ByteCount = 10 * 1024**3
    on_full: Literal["stop_acking", "drop_to_dlq", "alert_only"] = "stop_acking"


class Drain(SpecModel):
    """Replay of spooled items once the circuit closes."""

    on_recovery: Literal["ordered_then_live", "interleave"] = "ordered_then_live"
    rate_per_sec: float = Field(default=100.0, gt=0, le=1_000_000)
    max_replay_attempts: int = Field(default=10, ge=1, le=1000)


class Spool(SpecModel):
    """Store-and-forward while the downstream is down. ``off`` (the default) leaves durability to the
    source (stop acking); ``buffer_and_ack`` and ``hybrid`` need a ``backend``."""

    mode: Literal["off", "buffer_and_ack", "hybrid"] = "off"
    backend: Literal["gcs", "s3", "local_disk", "nats_object"] | None = None
    bucket: str | None = Field(default=None, min_length=1, max_length=1024)
    path: str | None = Field(default=None, min_length=1, max_length=1024)
    auth: WalletAlias | None = None
    circuit: Circuit = Field(default_factory=Circuit)
    ordering: Literal["global", "per_key", "none"] = "global"
    ordering_key: str | None = Field(default=None, min_length=1, max_length=256)
    hybrid_escalate_after_ms: int = Field(default=60_000, ge=0, le=7 * 86_400_000)
    retention: Retention = Field(default_factory=Retention)
    drain: Drain = Field(default_factory=Drain)

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 (PyYAML) reads an unquoted ``mode: off`` as the boolean false.
        return "off" if value is False else value
