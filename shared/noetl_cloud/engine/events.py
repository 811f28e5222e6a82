"""Event emission for the engine (§9): a sink port, an in-memory sink, and the per-execution emitter.

Event types the engine emits: ``playbook.started|completed|failed``, ``step.started|done|failed``,
``step.denied`` (admission said no; the token goes nowhere), ``task.started|done``, ``loop.done``,
``ctx.patched`` (a JSON-Patch of ``ctx``), ``next.selected`` (one per fired arc).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from noetl_cloud.envelope import EventEnvelope, EventFactory


class EventSink(Protocol):
    """Where events go (an event store, a JSONL file, a list)."""

    def emit(self, event: EventEnvelope) -> None:
        """Accept one event, in emission order."""
        ...


class MemorySink:
    """Keeps every event in a list."""

    def __init__(self) -> None:
        self.events: list[EventEnvelope] = []

    def emit(self, event: EventEnvelope) -> None:
        """Append ``event``."""
        self.events.append(event)

    def types(self) -> list[str]:
        """The event types in order."""
        return [event.event_type for event in self.events]


class Emitter:
    """Mints the events of one execution on stream ``execution/<id>`` and hands them to the sink."""

    def __init__(self, factory: EventFactory, sink: EventSink, execution_id: str) -> None:
        self.factory = factory
        self.sink = sink
        self.execution_id = execution_id
        self.stream = f"execution/{execution_id}"
        self.last: EventEnvelope | None = None
        self._lock = threading.Lock()  # parallel loop iterations emit from several threads

    def __call__(
        self, event_type: str, payload: dict[str, Any], *, meta: dict[str, Any] | None = None
    ) -> EventEnvelope:
        """Emit one event; its causation is the previous event of this execution (one at a time)."""
        with self._lock:
            event = self.factory.new(
                event_type,
                stream_id=self.stream,
                aggregate_type="execution",
                aggregate_id=self.execution_id,
                execution_id=self.execution_id,
                payload=payload,
                meta=meta,
                causation_id=self.last.event_id if self.last else None,
            )
            self.sink.emit(event)
            self.last = event
            return event


EmitFn = Callable[..., EventEnvelope]
