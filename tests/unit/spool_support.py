"""In-memory wiring of the spool engine and drainer for unit tests: our own ports' memory adapters."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.item import SpoolItem
from noetl_cloud.spool.memory import InMemorySpool
from noetl_cloud.spool.replayer import ReplayResult, replay_request
from noetl_cloud.spool.target import SpoolTarget

SUB = "subscriptions/devices"
DOWNSTREAM = "execute:http://control"


class Clock:
    """A wall clock and a monotonic clock that move only when told (``sleep`` moves both)."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)
        self.mono = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.mono += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)


@dataclass
class Control:
    """The execute API as the replayer sees it, in memory: a dedup window by key, like the real one."""

    down: bool = False
    rejects: set[str] = field(default_factory=set)  # message ids whose playbook refuses them
    executions: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    _dedup: dict[str, str] = field(default_factory=dict)

    def replay(self, item: SpoolItem, payload: bytes) -> ReplayResult:
        self.calls += 1
        if self.down:
            return ReplayResult("unavailable", detail="upstream_unavailable")
        if item.message_id in self.rejects:
            return ReplayResult("rejected", detail="playbook_not_found")
        request = replay_request(item, payload)
        key = request["dedup"]["key"]
        if key in self._dedup:
            return ReplayResult("replayed", self._dedup[key], duplicate=True)
        execution_id = str(len(self.executions) + 1)
        self._dedup[key] = execution_id
        self.executions.append(request)
        return ReplayResult("replayed", execution_id)

    def order_of(self, key: str) -> list[int]:
        """The ``n`` of each execution's workload whose ordering key is ``key``, in execution order."""
        return [r["workload"]["n"] for r in self.executions if r["workload"]["key"] == key]


@dataclass
class World:
    clock: Clock
    kv: InMemoryKeyValueStore
    sink: MemoryEventSink
    journal: EventJournal
    backend: InMemorySpool
    engine: SpoolEngine
    control: Control
    closed: list[str]

    def target(self, **spool: Any) -> SpoolTarget:
        block: dict[str, Any] = {
            "mode": "buffer_and_ack",
            "backend": "gcs",
            "ordering": "per_key",
            "ordering_key": "x-device",
            "circuit": {"trip_after": 2, "probe_after_ms": 1000},
        }
        block.update(spool)
        return SpoolTarget.from_spec(SUB, block, source_kind="push", downstream=DOWNSTREAM)

    def drainer(self, **kwargs: Any) -> Drainer:
        options = {"lease_ttl_s": 30.0, "budget_s": 600.0, "sleep": self.clock.sleep, "monotonic": self.clock.monotonic}
        options.update(kwargs)
        return Drainer(self.engine, self.control, **options)

    def spool(self, target: SpoolTarget, n: int, key: str | None = "a", reason: str = "circuit_open") -> Any:
        workload = {"n": n, "key": key}
        plan = {"playbook": "domain/handle", "request": {"path": "domain/handle", "meta": {"message_id": f"m{n}"}}}
        return self.engine.spool(
            target,
            payload_bytes(workload),
            message_id=f"m{n}",
            source="webhook",
            plan=plan,
            reason=reason,
            ordering_key=key,
        )

    def types(self) -> list[str]:
        return [e.event_type for e in self.sink.events]


def world() -> World:
    clock = Clock()
    kv = InMemoryKeyValueStore(clock=clock)
    sink = MemoryEventSink()
    journal = EventJournal(sink, kv, monotonic=clock.monotonic)
    backend = InMemorySpool()
    closed: list[str] = []
    ids = itertools.count(1)
    engine = SpoolEngine(
        kv,
        journal,
        FixedBackend(backend),
        ids=lambda: next(ids),
        instance="test",
        clock=clock,
        monotonic=clock.monotonic,
        on_circuit_closed=lambda target: closed.append(target.subscription),
    )
    return World(clock, kv, sink, journal, backend, engine, Control(), closed)


def workload_of(payload: bytes) -> Any:
    return json.loads(payload)
