"""The publisher port: hand a batch of messages to a topic transport, learn which ones failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from noetl_cloud.errors import Unavailable


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    topic: str  # the short topic name, e.g. "noetl-commands-shared"
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    ordering_key: str | None = None


class PublishFailed(Unavailable):
    """Some messages could not be published; they stay in the outbox for the sweep."""

    code = "publish_failed"


class Publisher(Protocol):
    def publish(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
        """Publish every message; return, per message in order, its server id or ``None`` if it failed.

        Never raises for a per-message failure: the caller keeps failed messages for a retry.
        """
        ...

    def ensure_topics(self, topics: Sequence[str]) -> None:
        """Create the topics that do not exist yet (local stack and tests; Terraform in Google Cloud)."""
        ...
