"""In-memory publisher: unit tests and the embedded local mode."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from noetl_cloud.messaging.port import OutboundMessage


@dataclass
class InMemoryPublisher:
    """Records published messages per topic; ``fail_topics`` simulates a broken transport."""

    messages: dict[str, list[OutboundMessage]] = field(default_factory=dict)
    fail_topics: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: int = 0

    def publish(self, messages: Sequence[OutboundMessage]) -> list[str | None]:
        out: list[str | None] = []
        with self._lock:
            for message in messages:
                if message.topic in self.fail_topics:
                    out.append(None)
                    continue
                self._seq += 1
                self.messages.setdefault(message.topic, []).append(message)
                out.append(str(self._seq))
        return out

    def ensure_topics(self, topics: Sequence[str]) -> None:
        with self._lock:
            for topic in topics:
                self.messages.setdefault(topic, [])
