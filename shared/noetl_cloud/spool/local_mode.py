"""Draining the spool of ``noetl-cloud subscribe`` in-process (RFC §5.1, §8.6: ``local_disk``, circuit
state in a local file).

In local mode there is no drainer role: :class:`LocalDrainLoop` runs beside the runtime, in a thread,
and drains the subscription's spool whenever items wait - every ``every_s`` (the probe's pace), and at
once when the engine says a circuit closed or a spooled message found the probe due. The replay goes
through the same dispatch as live messages (the in-process runner, :class:`DispatchReplayer`), with
the drain's order, dedup and dead-lettering (:class:`~noetl_cloud.spool.drain.Drainer`). Circuit,
backlog mark and lane leases live in the command's key-value file
(:class:`~noetl_cloud.kv.file.FileKeyValueStore`), so a circuit that opened survives a restart and
the restarted command replays what the last one spooled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.drain_report import DrainReport
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.item import SpoolItem
from noetl_cloud.spool.replayer import ReplayResult, replay_request
from noetl_cloud.spool.target import SpoolTarget

log = logging.getLogger(__name__)


class Outcome(Protocol):
    """A dispatch's answer for one request (the runtime's ``ItemOutcome``)."""

    @property
    def status(self) -> str: ...

    @property
    def execution_id(self) -> str | None: ...

    @property
    def error(self) -> dict[str, Any] | None: ...


Dispatch = Callable[[Sequence[dict[str, Any]]], Sequence[Outcome]]


class DispatchReplayer:
    """Replays one item through a runtime control's ``dispatch`` (one request per call)."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    def replay(self, item: SpoolItem, payload: bytes) -> ReplayResult:
        try:
            (outcome,) = self.dispatch([replay_request(item, payload)])
        except Exception:
            log.warning("local replay failed", exc_info=True)
            return ReplayResult("unavailable", detail="runner_error")
        if outcome.status in ("accepted", "duplicate"):
            return ReplayResult("replayed", outcome.execution_id, duplicate=outcome.status == "duplicate")
        if outcome.status == "unavailable":
            return ReplayResult("unavailable", detail="unavailable")
        return ReplayResult("rejected", detail=str((outcome.error or {}).get("code") or "rejected"))


class LocalDrainLoop:
    """Drains ``target``'s spool with ``engine`` and ``replayer`` until :meth:`stop`."""

    def __init__(
        self,
        engine: SpoolEngine,
        target: SpoolTarget,
        replayer: DispatchReplayer,
        *,
        every_s: float = 1.0,
        lease_ttl_s: float = 5.0,
    ) -> None:
        self.engine = engine
        self.target = target
        self.every_s = every_s
        self.drainer = Drainer(engine, replayer, holder="subscribe", lease_ttl_s=lease_ttl_s)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.reports: list[DrainReport] = []
        # Whoever closes the circuit, or spools while its probe is due, wakes the loop.
        engine.on_circuit_closed = lambda _target: self.wake.set()
        engine.on_probe_due = lambda _target: self.wake.set()

    def tick(self) -> DrainReport | None:
        """One drain if items wait (``None`` when the spool is empty)."""
        backend, _label = self.engine.backends.resolve(self.target.spool)
        if not backend.lanes(self.target.subscription):
            return None
        report = self.drainer.drain(self.target)
        self.reports.append(report)
        return report

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.tick()
            except Exception:
                log.warning("local drain failed", exc_info=True)
            self.wake.wait(self.every_s)
            self.wake.clear()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="subscribe-drain", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
