"""``noetl-cloud subscribe``'s own drain (issue 23, item 7): its local_disk spool is replayed in receive
order once the in-process runner answers again, and its circuit lives in a local file, so a restart of
the command in the middle of an outage finds the circuit open and the backlog waiting."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noetl_cloud.kv.file import FileKeyValueStore
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.local_disk import LocalDiskSpool
from noetl_cloud.spool.local_mode import DispatchReplayer, LocalDrainLoop
from noetl_cloud.spool.target import SpoolTarget
from tests.unit.spool_support import Clock

SUB = "subscriptions/local"
SPOOL = {
    "mode": "buffer_and_ack",
    "backend": "local_disk",
    "ordering": "per_key",
    "ordering_key": "x-device",
    "circuit": {"trip_after": 2, "probe_after_ms": 1000},
}


@dataclass
class Outcome:
    status: str
    execution_id: str | None = None
    error: dict[str, Any] | None = None


class Runner:
    """The in-process runner: unavailable while ``up`` is false; records what it ran."""

    def __init__(self) -> None:
        self.up = False
        self.ran: list[tuple[str, int]] = []

    def dispatch(self, requests: Any) -> list[Outcome]:
        if not self.up:
            return [Outcome("unavailable")] * len(requests)
        out = []
        for request in requests:
            workload = request["workload"]
            self.ran.append((workload["key"], workload["n"]))
            out.append(Outcome("accepted", str(len(self.ran))))
        return out


def command(tmp: Path, clock: Clock, runner: Runner) -> tuple[SpoolEngine, LocalDrainLoop, SpoolTarget]:
    """What one start of ``subscribe`` builds: the file state, the spool folder, the drain loop."""
    kv = FileKeyValueStore(tmp / ".noetl-spool.state.json", clock=clock)
    ids = itertools.count(int(clock.monotonic() * 1000) + 1)
    engine = SpoolEngine(
        kv,
        EventJournal(MemoryEventSink(), kv),
        FixedBackend(LocalDiskSpool(tmp / ".noetl-spool", fsync=False)),
        ids=lambda: next(ids),
        clock=clock,
        monotonic=clock.monotonic,
    )
    target = SpoolTarget.from_spec(SUB, SPOOL, source_kind="pull", downstream="local:in-process")
    return engine, LocalDrainLoop(engine, target, DispatchReplayer(runner.dispatch)), target


def spool(engine: SpoolEngine, target: SpoolTarget, n: int, key: str) -> None:
    plan = {"playbook": "p", "request": {"path": "p", "meta": {"message_id": f"m{n}"}}}
    engine.spool(
        target,
        payload_bytes({"n": n, "key": key}),
        message_id=f"m{n}",
        source="pubsub",
        plan=plan,
        reason="circuit_open",
        ordering_key=key,
    )


def test_the_spool_is_replayed_in_order_once_the_runner_recovers_also_after_a_restart(tmp_path: Path) -> None:
    clock, runner = Clock(), Runner()
    engine, loop, target = command(tmp_path, clock, runner)
    for _ in range(2):  # the runner fails twice: the circuit opens
        engine.report(target, engine.gate(target), ok=False)
    for n in range(6):
        spool(engine, target, n, "ab"[n % 2])
    clock.advance(1.0)
    report = loop.tick()  # the probe is due: it replays the oldest item, which fails
    assert report is not None and (report.state, report.replayed, report.probed) == ("circuit_open", 0, True)
    assert runner.ran == []

    # The command is restarted mid-outage: the circuit (in the file) is still open, the items wait.
    engine, loop, target = command(tmp_path, clock, runner)
    assert engine.breaker(target).state().state == "open"
    assert engine.backlog(SUB) and engine.gate(target).action == "spool"
    runner.up = True
    report = loop.tick()
    assert report is not None and report.state == "circuit_open"  # the probe waits probe_after_ms again
    clock.advance(1.0)
    report = loop.tick()
    assert report is not None and (report.state, report.replayed) == ("drained", 6)
    assert [n for key, n in runner.ran if key == "a"] == [0, 2, 4]
    assert [n for key, n in runner.ran if key == "b"] == [1, 3, 5]
    assert engine.breaker(target).state().state == "closed" and not engine.backlog(SUB)
    assert loop.tick() is None  # nothing left
    assert engine.gate(target).action == "dispatch"  # live messages run directly again
    state = json.loads((tmp_path / ".noetl-spool.state.json").read_text())
    assert any(key.startswith("circuit/") for key in state)


def test_a_closed_circuit_or_a_due_probe_wakes_the_loop(tmp_path: Path) -> None:
    clock, runner = Clock(), Runner()
    engine, loop, target = command(tmp_path, clock, runner)
    assert not loop.wake.is_set()
    assert engine.on_probe_due is not None and engine.on_circuit_closed is not None
    engine.on_probe_due(target)
    assert loop.wake.is_set()


def test_a_runner_that_raises_is_unavailable_and_a_refusal_is_rejected() -> None:
    def boom(requests: Any) -> list[Outcome]:
        raise RuntimeError("crashed")

    from noetl_cloud.spool.item import SpoolItem

    item = SpoolItem.for_payload(
        b"{}",
        subscription=SUB,
        lane="k-a",
        source="pubsub",
        message_id="m1",
        idempotency_key=None,
        recv_seq=1,
        ordering_key="a",
        spooled_at=Clock()(),
        reason="circuit_open",
        plan={"playbook": "p", "request": {"path": "p"}},
    )
    assert DispatchReplayer(boom).replay(item, b"{}").outcome == "unavailable"
    refused = DispatchReplayer(lambda r: [Outcome("rejected", error={"code": "playbook_not_found"})])
    result = refused.replay(item, b"{}")
    assert (result.outcome, result.detail) == ("rejected", "playbook_not_found")
