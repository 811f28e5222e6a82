"""The control plane's composition root: adapters wired to services on first use, per process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from noetl_cloud.control.catalog import CatalogService
from noetl_cloud.control.execution_queries import ExecutionQueries
from noetl_cloud.control.executions import ExecutionService
from noetl_cloud.control.ingress_scope import IngressScope
from noetl_cloud.control.lifecycle import SubscriptionService
from noetl_cloud.control.listeners import ListenerService
from noetl_cloud.control.orchestrator import Orchestrator
from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.envelope import EventFactory
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRelay, relay_for
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.messaging.port import Publisher
from noetl_cloud.replay.service import ReplayService
from noetl_cloud.retention.service import RetentionService
from noetl_cloud.secrets import resolver_from_settings
from noetl_cloud.secrets.port import SecretResolver
from noetl_cloud.settings import Settings

if TYPE_CHECKING:
    from noetl_cloud.control.scheduled import ScheduledSubscriptions
    from noetl_cloud.spool.downstreams import DownstreamWatcher


@dataclass
class ControlPlane:
    """Everything the execute role serves, built lazily from settings."""

    settings: Settings
    env: Mapping[str, str] = field(default_factory=dict)  # for the local wallet's NOETL_SECRET_* only
    publisher_override: Publisher | None = None

    @cached_property
    def engine(self) -> Engine:
        # Generic plans where they cost no more: the write statements of the hot path plan nothing
        # that depends on the data (the outbox's marks and sweeps ask for custom plans themselves).
        return create_db_engine(self.settings, plan_cache_mode="auto")

    @cached_property
    def ids(self) -> SnowflakeGenerator:
        return SnowflakeGenerator(self.settings.node_id)

    @cached_property
    def events(self) -> EventFactory:
        s = self.settings
        return EventFactory(
            tenant_id=s.tenant_id,
            organization_id=s.organization_id,
            producer=f"noetl://tenant/{s.tenant_id}/org/{s.organization_id}/role/{s.role}/node/{self.ids.node_id}",
            next_id=self.ids.next_id,
        )

    @cached_property
    def store(self) -> PostgresEventStore:
        # Writers of events of no execution (catalog, subscriptions, listeners, the runtime's and the
        # spool's reports) publish them after their commit, as the execution writers do.
        return PostgresEventStore(self.engine, events_topic=self.settings.events_topic, relay=self.relay.hand_off)

    @cached_property
    def publisher(self) -> Publisher:
        if self.publisher_override is not None:
            return self.publisher_override
        from noetl_cloud.messaging.pubsub import PubSubPublisher

        self.settings.require("project_id")
        assert self.settings.project_id is not None
        return PubSubPublisher(self.settings.project_id, emulator_host=self.settings.pubsub_emulator_host)

    @cached_property
    def relay(self) -> OutboxRelay:
        return relay_for(self.engine, self.publisher, self.settings)

    @cached_property
    def catalog(self) -> CatalogService:
        s = self.settings
        return CatalogService(
            self.engine,
            self.store,
            self.ids,
            self.events,
            tenant_id=s.tenant_id,
            organization_id=s.organization_id,
            pools=s.pools,
        )

    @cached_property
    def executions(self) -> ExecutionService:
        return ExecutionService(
            self.engine,
            self.store,
            self.relay,
            self.catalog,
            self.ids,
            self.events,
            pools=self.settings.pools,
            orchestrator=self.orchestrator,
        )

    @cached_property
    def execution_queries(self) -> ExecutionQueries:
        return ExecutionQueries(self.engine, (self.settings.tenant_id, self.settings.organization_id))

    @cached_property
    def orchestrator(self) -> Orchestrator:
        s = self.settings
        orchestrator = Orchestrator(
            self.engine,
            self.store,
            self.relay,
            self.ids,
            self.events,
            command_topic_prefix=s.command_topic_prefix,
            lease_s=s.command_lease_s,
            max_attempts=s.command_max_attempts,
            renotify_after_s=s.command_renotify_after_s,
        )
        orchestrator.downstreams = self.downstream_watcher
        return orchestrator

    @cached_property
    def downstream_watcher(self) -> DownstreamWatcher | None:
        """The downstream circuits' feed (``None`` without a shared coordination store, or turned off)."""
        from noetl_cloud.control.downstreams import watcher_from_settings

        return watcher_from_settings(self.settings, self.catalog, self.store, self.events)

    @cached_property
    def subscriptions(self) -> SubscriptionService:
        return SubscriptionService(self.engine, self.store, self.catalog, self.ids, self.events)

    @cached_property
    def secrets(self) -> SecretResolver:
        return resolver_from_settings(self.settings, self.env)

    @cached_property
    def listeners(self) -> ListenerService:
        return ListenerService(self.catalog, self.subscriptions, self.secrets, self.store, self.events)

    @cached_property
    def scheduled(self) -> ScheduledSubscriptions:
        from noetl_cloud.control.scheduled import ScheduledSubscriptions

        tenant = (self.settings.tenant_id, self.settings.organization_id)
        return ScheduledSubscriptions(self.engine, self.catalog, self.subscriptions, self.executions, tenant=tenant)

    @cached_property
    def ingress_scope(self) -> IngressScope:
        return IngressScope(self.catalog)

    @cached_property
    def retention(self) -> RetentionService:
        return RetentionService(self.engine, self.settings)

    @cached_property
    def replay(self) -> ReplayService:
        from noetl_cloud.replay.archived import ArchiveReader
        from noetl_cloud.replay.upcasters import default_registry

        return ReplayService(self.engine, default_registry(), archive=ArchiveReader(self.settings))
