"""The projector role's composition root: built lazily from settings, one per process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import Engine

from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.projector.service import Projector
from noetl_cloud.replay.service import ReplayService
from noetl_cloud.replay.upcasters import UpcasterRegistry, default_registry
from noetl_cloud.settings import Settings


@dataclass
class ProjectorRole:
    settings: Settings

    @cached_property
    def engine(self) -> Engine:
        return create_db_engine(self.settings)

    @cached_property
    def reader(self) -> Engine:
        """Autocommit connections for deliveries: a duplicate costs one round trip (its first read), a
        fold at the tip two or three (that read, a load of the surfaces when this instance did not fold
        the execution last, one conditional write); no ``BEGIN``/``COMMIT`` around them."""
        # Generic plans where they cost no more (``auto``): every statement of a delivery is a lookup by key
        # (event id, tracking row, an execution's events after a position, surface rows, the upserts), and
        # planning the first read's join over the event partitions afresh cost 2-10 ms a delivery.
        return create_db_engine(
            self.settings,
            plan_cache_mode="auto",
            isolation_level="AUTOCOMMIT",
            pool_size=self.settings.db_pool_size,
            max_overflow=0,
        )

    @cached_property
    def folds(self) -> ThreadPoolExecutor:
        """The threads that fold a bundle's executions side by side: one connection of the reader's
        pool each, one left for the deliveries the request threads fold themselves."""
        return ThreadPoolExecutor(max(1, self.settings.db_pool_size - 1), thread_name_prefix="fold")

    @cached_property
    def registry(self) -> UpcasterRegistry:
        return default_registry()

    @cached_property
    def projector(self) -> Projector:
        return Projector(
            self.engine,
            self.registry,
            reader=self.reader,
            snapshot_every=self.settings.replay_snapshot_every,
            snapshot_keep=self.settings.replay_snapshot_keep,
            snapshot_anchor_every=self.settings.replay_snapshot_anchor_every,
            cache_rows=self.settings.projector_cache_rows,
        )

    @cached_property
    def replay(self) -> ReplayService:
        return ReplayService(self.engine, self.registry)
