"""What every part of :class:`~noetl_cloud.frames.service.FrameService` shares: its adapters, and how a
transition writes its events (idempotency keys, the frame's own stream, appends with their outbox rows,
the hand-off of those rows to the relay after the commit)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine

from noetl_cloud.envelope import EventEnvelope, EventFactory, PayloadRef
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRelay, OutboxRow
from noetl_cloud.ids import SnowflakeGenerator


class FrameStreams:
    """The frame service's adapters and event writing; the base of its parts."""

    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        relay: OutboxRelay | None,
        ids: SnowflakeGenerator,
        events: EventFactory,
        *,
        reaper_limit: int = 1000,
    ) -> None:
        self.engine = engine
        self.store = store
        self.relay = relay
        self.ids = ids
        self.events = events
        self.reaper_limit = reaper_limit

    @property
    def tenant(self) -> tuple[str, str]:
        return self.events.tenant_id, self.events.organization_id

    # -- events ---------------------------------------------------------------------------------

    def _key(self, execution_id: int, *parts: object) -> str:
        tenant, org = self.tenant
        return "/".join([tenant, org, str(execution_id), *map(str, parts)])

    def _frame_event(
        self,
        row: Any,
        event_type: str,
        payload: dict[str, Any],
        key_parts: Sequence[object],
        *,
        causation: int | None = None,
        payload_ref: PayloadRef | None = None,
        meta: dict[str, Any] | None = None,
    ) -> EventEnvelope:
        execution_id = int(row.execution_id)
        return self.events.new(
            event_type,
            stream_id=f"execution/{execution_id}/stage/{row.stage_id}/frame/{row.frame_id}",
            aggregate_type="frame",
            aggregate_id=str(row.frame_id),
            execution_id=str(execution_id),
            payload={
                "stage_id": str(row.stage_id),
                "frame_id": str(row.frame_id),
                "frame_index": row.frame_index,
                **({"parent_frame_id": str(row.parent_frame_id)} if row.parent_frame_id else {}),
                **payload,
            },
            payload_ref=payload_ref,
            meta=meta,
            causation_id=str(causation) if causation else None,
            idempotency_key=self._key(execution_id, "frame", row.frame_id, *key_parts),
        )

    def _append(self, conn: Connection, events: Sequence[EventEnvelope], outbox: list[OutboxRow]) -> None:
        """Append events of any frames' streams (each stream's in the order given), in a few statements."""
        if not events:
            return
        streams: dict[str, list[EventEnvelope]] = {}
        for event in events:
            streams.setdefault(event.stream_id, []).append(event)
        self.store.append_many_in(conn, list(streams.items()), outbox=outbox)

    def _publish(self, rows: list[OutboxRow]) -> None:
        """Hand committed outbox rows to the relay (a failed or lost publish leaves them pending for the
        outbox sweep)."""
        if self.relay is not None:
            self.relay.hand_off(rows)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the relay has published what it was handed; true when it has."""
        return self.relay is None or self.relay.flush(timeout)
