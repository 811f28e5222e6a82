"""Replay of an archived execution (docs/retention.md): its events read back from the Parquet object
retention wrote, cut at the same kinds of cutoff the live path resolves in SQL.

:class:`ReplayService` asks :class:`ArchiveReader` only when the live log has no event of the execution.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from noetl_cloud.errors import NotFound, Unavailable
from noetl_cloud.payload.port import PayloadReference
from noetl_cloud.replay.events import from_row
from noetl_cloud.replay.upcasters import Event
from noetl_cloud.retention import archive
from noetl_cloud.settings import Settings

_ARCHIVED = text(
    "SELECT archive_ref FROM execution_archive WHERE tenant_id = :t AND organization_id = :o AND execution_id = :e"
)


class ArchiveReader:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def rows(
        self, conn: Connection, tenant_id: str, organization_id: str, execution_id: str
    ) -> list[dict[str, Any]] | None:
        """The archived rows of ``event`` of the execution, in store order; ``None`` when it is not archived."""
        found = conn.execute(_ARCHIVED, {"t": tenant_id, "o": organization_id, "e": int(execution_id)}).one_or_none()
        if found is None:
            return None
        if found.archive_ref is None:
            raise NotFound(
                f"execution {execution_id} expired and its policy kept no archive", code="execution_not_archived"
            )
        store = archive.archive_store(self.settings, tenant_id, organization_id)
        if store is None:
            raise Unavailable("execution archived but no archive store is configured", code="archive_unavailable")
        return archive.decode(store.fetch(PayloadReference(**found.archive_ref)))


def cut(rows: list[dict[str, Any]], cutoff: Any, execution_id: str) -> tuple[list[Event], int]:
    """The events at or before ``cutoff`` (a :class:`~noetl_cloud.replay.service.Cutoff`) and its position."""
    last = int(rows[-1]["position"]) if rows else 0
    if cutoff.event_id is not None:
        upto = next((int(r["position"]) for r in rows if int(r["event_id"]) == cutoff.event_id), None)
        if upto is None:
            raise NotFound(
                f"event {cutoff.event_id} is not an event of execution {execution_id}", code="event_not_found"
            )
    elif cutoff.position is not None:
        upto = min(cutoff.position, last)
    else:
        upto = max((int(r["position"]) for r in rows if r["ingest_time"] <= cutoff.time), default=0)
    return [from_row(r) for r in rows if int(r["position"]) <= upto], upto
