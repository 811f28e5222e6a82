"""The execute role's side of the downstream circuits (``docs/spool.md``, "Downstream circuits").

:func:`watcher_from_settings` builds the :class:`~noetl_cloud.spool.downstreams.DownstreamWatcher`
the orchestrator reports ended executions to: the subscription's ``spool`` and ``downstreams`` read
from the catalog (the latest version, cached a few seconds), the circuits in the shared coordination
store, the ``subscription.circuit.opened`` / ``closed`` events appended to the event log directly
(this role owns it), parked in the store while the database does not answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from noetl_cloud.control.catalog import CatalogService
from noetl_cloud.control.event_models import SpoolEventIn
from noetl_cloud.control.spool_events import SpoolEventService
from noetl_cloud.envelope import EventFactory
from noetl_cloud.errors import NotFound, Unavailable
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.settings import Settings
from noetl_cloud.spec import SubscriptionDoc, parse_document
from noetl_cloud.spec.downstreams import Downstream
from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool.downstreams import DownstreamWatcher
from noetl_cloud.spool.events import EventJournal, SpoolEvent

log = logging.getLogger(__name__)


class LogEventSink:
    """The spool event sink of the role that owns the event log: appends, each key once."""

    def __init__(self, service: SpoolEventService) -> None:
        self.service = service

    def record(self, events: Sequence[SpoolEvent]) -> int:
        try:
            recorded, _duplicates = self.service.record([SpoolEventIn.model_validate(e.to_wire()) for e in events])
        except SQLAlchemyError as exc:  # the database is down: the journal parks them
            raise Unavailable("the event log did not take the circuit events", code="event_log_unavailable") from exc
        return recorded


class CatalogDownstreams:
    """``spool`` and ``downstreams`` of a subscription path, from the catalog's latest version."""

    def __init__(self, catalog: CatalogService) -> None:
        self.catalog = catalog

    def __call__(self, path: str) -> tuple[Spool, list[Downstream]] | None:
        try:
            entry = self.catalog.get(path)
        except NotFound:
            return None
        if entry.kind != "Subscription":
            return None
        doc = parse_document(entry.content)
        if not isinstance(doc, SubscriptionDoc) or not doc.spec.downstreams:
            return None
        return doc.spec.spool, list(doc.spec.downstreams)


def watcher_from_settings(
    settings: Settings, catalog: CatalogService, store: PostgresEventStore, events: EventFactory
) -> DownstreamWatcher | None:
    """The watcher, or ``None``: turned off, or no store the gating roles share (memory is per process)."""
    if not settings.downstream_circuits:
        return None
    if settings.environment != "gcp" and not settings.firestore_emulator_host:
        return None
    from noetl_cloud.spool.bootstrap import kv_from_settings

    kv = kv_from_settings(settings)
    journal = EventJournal(LogEventSink(SpoolEventService(store, events)), kv)
    return DownstreamWatcher(kv, CatalogDownstreams(catalog), journal)
