"""Does the projector keep up? Its fold rate against the write rate of a burst, on the local stack's
PostgreSQL (a scratch database per run).

Two figures, both as ``events/s folded ÷ events/s written`` (``ratio > 1``: the projector keeps up):

  (a) burst, live: ``--executions`` executions of 3 noop steps (28 events each, in the writes the
      orchestrator makes: a turn, a claim, a report), ``--threads`` writers; after each write its
      notification is delivered to the projector's push endpoint (a Flask test client: push auth,
      envelope parsing, fold), as Pub/Sub does with ordering keys. The time spent in writes and the
      time spent in deliveries are summed apart: the projector at its worst, a delivery per write
      (no batching: a projector that falls behind folds many writes in one delivery, which is faster);
  (b) a long loop: one execution of ``--iterations`` iterations written by one thread at full speed
      while one projector thread takes its deliveries in order (each folds up to the tip; the ones
      that follow a batch are duplicates). Printed: how many events behind the projection was when
      the last event was written, and how long after that it was current.

    make up && .venv/bin/python bench/projector_fold.py [--executions 300] [--iterations 10000]

(a') is (a) with each execution's writes first and their deliveries after (a projector that fell
behind: the first delivery folds the pending writes in one batch, the rest are duplicates).

The last line is ``ratio projector_fold_to_write: X`` of (a), the projector's worst case. :func:`measure_fold_rate` and
:func:`measure_long_loop` are what ``bench/scale.py`` imports. Never fails on timing.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import secrets
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pg8000.dbapi
from pydantic import SecretStr
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.migrate import upgrade
from noetl_cloud.envelope import EventEnvelope, EventFactory
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.projector.app import build_app, push_auth_from_settings
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-push"  # noqa: S105 - the local push token of this run
Write = list[EventEnvelope]


@dataclass(frozen=True)
class FoldRate:
    events: int
    writes: int
    write_s: float  # time spent writing, summed over the writer threads
    fold_s: float  # time spent in deliveries, summed over the same threads

    @property
    def write_eps(self) -> float:
        return self.events / self.write_s

    @property
    def fold_eps(self) -> float:
        return self.events / self.fold_s

    @property
    def ratio(self) -> float:
        return self.fold_eps / self.write_eps


@dataclass(frozen=True)
class LongLoop:
    events: int
    write_s: float
    behind_at_end: int  # events not folded yet when the last one was written
    current_after_s: float  # from the last write until the projection covered it
    deliveries: int
    applied: int  # deliveries that folded something (the rest were duplicates)
    snapshots: int  # kept after pruning
    snapshot_bytes: int  # their stored size (compressed state)
    snapshot_state_bytes: int  # the newest one's state as canonical JSON, uncompressed
    event_bytes: int  # the execution's events on disk (the table and its TOAST)


class Writer:
    """Events of executions in the writes the orchestrator makes (one transaction each)."""

    def __init__(self, tenant: str = "bench") -> None:
        self.ids = SnowflakeGenerator(7)
        self.factory = EventFactory(
            tenant_id=tenant, organization_id=tenant, producer="noetl://bench", next_id=self.ids.next_id
        )

    def _new(
        self, eid: str, event_type: str, payload: dict[str, object], agg: str = "execution", agg_id: str = ""
    ) -> EventEnvelope:
        return self.factory.new(
            event_type,
            stream_id=f"execution/{eid}",
            aggregate_type=agg,
            aggregate_id=agg_id or eid,
            execution_id=eid,
            payload=payload,
        )

    def _command(self, eid: str, step: str, run: str, **extra: object) -> tuple[str, list[Write]]:
        cid = self.ids.next_str()
        base = {"command_id": cid, "step": step, "attempt": 1, **extra}
        issued = self._new(eid, "command.issued", {**base, "step_run_id": run}, "command", cid)
        claim = [self._new(eid, "command.claimed", {**base, "worker_id": "bench"}, "command", cid)]
        report = [
            self._new(eid, "command.started", {**base, "worker_id": "bench"}, "command", cid),
            self._new(eid, "task.done", {"step": step, "status": "ok", "result": 1}),
            self._new(eid, "command.completed", {**base, "worker_id": "bench", "status": "ok"}, "command", cid),
        ]
        return cid, [[issued], claim, report]

    def noop_run(self, steps: int = 3) -> tuple[str, list[Write]]:
        """A ``steps``-step noop execution: its start turn, then a claim and a report turn per step."""
        eid = self.ids.next_str()
        writes: list[Write] = [[self._new(eid, "playbook.started", {"path": "bench/fold", "entry_step": "s1"})]]
        for n in range(1, steps + 1):
            step, run = f"s{n}", self.ids.next_str()
            _cid, (issued, claim, report) = self._command(eid, step, run, kind="step")
            writes[-1] += [self._new(eid, "step.started", {"step": step, "step_run_id": run}), *issued]
            writes += [claim, report]
            writes[-1] += [
                self._new(eid, "step.done", {"step": step, "step_run_id": run, "status": "ok", "result": n}),
                self._new(eid, "next.selected", {"from": step, "step": f"s{n + 1}"}),
            ]
        writes[-1].append(self._new(eid, "playbook.completed", {"status": "ok"}))
        return eid, writes

    def loop_run(self, iterations: int) -> tuple[str, list[Write]]:
        """One sequential loop of ``iterations`` noop iterations: each report turn issues the next one."""
        eid, run = self.ids.next_str(), self.ids.next_str()
        writes: list[Write] = [
            [
                self._new(eid, "playbook.started", {"path": "bench/loop", "entry_step": "each"}),
                self._new(eid, "step.started", {"step": "each", "step_run_id": run}),
            ]
        ]
        for i in range(iterations):
            _cid, (issued, claim, report) = self._command(eid, "each", run, kind="iteration", iteration=i)
            writes[-1] += issued
            writes += [claim, report]
        writes[-1] += [
            self._new(eid, "loop.done", {"step": "each", "step_run_id": run, "status": "ok", "result": iterations}),
            self._new(eid, "playbook.completed", {"status": "ok"}),
        ]
        return eid, writes


def push_body(event_id: str, execution_id: str, events: int) -> dict[str, object]:
    data = json.dumps({"event_id": event_id, "execution_id": execution_id, "events": events}).encode()
    return {"message": {"data": base64.b64encode(data).decode(), "messageId": event_id, "orderingKey": execution_id}}


@contextmanager
def scratch(threads: int, snapshot_every: int = 1000) -> Iterator[tuple[Engine, ProjectorRole]]:
    """A scratch database on the local stack, migrated, with a projector role on it; dropped after."""
    env = LocalStack.from_env({"NOETL_LOCAL_STATE_DIR": str(ROOT / "local" / ".state"), **os.environ}).env()
    url = env["NOETL_DATABASE_URL"]
    parsed = make_url(url)
    admin = pg8000.dbapi.connect(
        user=parsed.username, password=parsed.password, host=parsed.host, port=parsed.port, database="postgres"
    )
    admin.autocommit = True
    name = f"bench_fold_{secrets.token_hex(4)}"
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    settings = Settings(
        database_url=url.rsplit("/", 1)[0] + "/" + name,
        environment="test",
        role="projector",
        tenant_id="bench",
        organization_id="bench",
        db_pool_size=2 * threads + 2,
        projector_push_token=SecretStr(TOKEN),
        internal_api_token=SecretStr(TOKEN),
        replay_snapshot_every=snapshot_every,
    )
    engine = create_db_engine(settings)
    role = ProjectorRole(settings)
    try:
        upgrade(engine)
        yield engine, role
    finally:
        role.engine.dispose()
        engine.dispose()
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def measure_fold_rate(executions: int = 300, threads: int = 4, steps: int = 3, *, backlog: bool = False) -> FoldRate:
    """(a): a burst of ``executions`` noop runs, each write followed by its delivery; writes and folds
    timed apart. ``backlog``: each execution's writes first, then their deliveries in order: a
    projector that fell behind, folding each execution's pending writes in one batch."""
    with scratch(threads) as (engine, role):
        store = PostgresEventStore(engine)
        app = build_app(role, push_auth_from_settings(role.settings), InternalAuth(token=SecretStr(TOKEN)))
        writer = Writer()
        runs = [writer.noop_run(steps) for _ in range(executions)]

        def drive(share: list[tuple[str, list[Write]]]) -> tuple[int, int, float, float]:
            client = app.test_client()
            events = writes = 0
            write_s = fold_s = 0.0
            order = [  # the share's executions interleaved, as in a burst
                (eid, run[turn])
                for turn in range(max(len(w) for _e, w in share))
                for eid, run in share
                if turn < len(run)
            ]

            def deliver(eid: str, batch: Write) -> float:
                started = time.perf_counter()
                answer = client.post(f"/?token={TOKEN}", json=push_body(batch[0].event_id, eid, len(batch)))
                assert answer.status_code == 200, answer.get_json()
                assert backlog or answer.get_json()["outcome"] == "applied", answer.get_json()
                return time.perf_counter() - started

            if backlog:  # execution by execution: its writes, then their deliveries (the load hits both alike)
                order = [(eid, batch) for eid, run in share for batch in run]
            behind: list[tuple[str, Write]] = []
            for n, (eid, batch) in enumerate(order):
                started = time.perf_counter()
                store.append(batch[0].stream_id, batch)
                write_s += time.perf_counter() - started
                events, writes = events + len(batch), writes + 1
                if not backlog:
                    fold_s += deliver(eid, batch)
                    continue
                behind.append((eid, batch))
                if n + 1 == len(order) or order[n + 1][0] != eid:
                    fold_s += sum(deliver(e, b) for e, b in behind)
                    behind = []
            return events, writes, write_s, fold_s

        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(drive, [runs[k::threads] for k in range(threads)]))
        with engine.connect() as conn:
            folded = conn.execute(text("SELECT coalesce(sum(version), 0) FROM projection_tracking")).scalar_one()
        total = sum(p[0] for p in parts)
        assert folded == total, (folded, total)
        return FoldRate(total, sum(p[1] for p in parts), sum(p[2] for p in parts), sum(p[3] for p in parts))


def measure_long_loop(iterations: int = 10_000, snapshot_every: int = 1000) -> LongLoop:
    """(b): one loop written at full speed while a projector thread takes its deliveries in order."""
    with scratch(2, snapshot_every) as (engine, role):
        store = PostgresEventStore(engine)
        projector = role.projector
        _eid, writes = Writer().loop_run(iterations)
        deliveries: queue.Queue[int | None] = queue.Queue()
        counts = {"deliveries": 0, "applied": 0}

        def project() -> None:
            while (event_id := deliveries.get()) is not None:
                counts["deliveries"] += 1
                counts["applied"] += projector.handle(event_id).outcome == "applied"

        consumer = threading.Thread(target=project)
        consumer.start()
        started = time.perf_counter()
        for batch in writes:
            store.append(batch[0].stream_id, batch)
            deliveries.put(int(batch[0].event_id))
        ended = time.perf_counter()
        events = sum(len(w) for w in writes)
        with engine.connect() as conn:
            folded = conn.execute(text("SELECT coalesce(max(version), 0) FROM projection_tracking")).scalar_one()
        deliveries.put(None)
        consumer.join()
        current = time.perf_counter()
        with engine.connect() as conn:
            final = conn.execute(text("SELECT version FROM projection_tracking")).scalar_one()
            kept = conn.execute(
                text(
                    "SELECT count(*) AS n, coalesce(sum(pg_column_size(state_compressed)), 0) AS size, "
                    "(SELECT state_compressed FROM projection_snapshot ORDER BY position DESC LIMIT 1) AS newest "
                    "FROM projection_snapshot"
                )
            ).one()
            event_bytes = conn.execute(  # a partitioned table: its partitions hold the rows
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
                    "WHERE inhparent = CAST('event' AS regclass)"
                )
            ).scalar_one()
        assert final == events, (final, events)
        newest = len(zlib.decompress(bytes(kept.newest))) if kept.newest is not None else 0
        return LongLoop(
            events,
            ended - started,
            events - int(folded),
            current - ended,
            counts["deliveries"],
            counts["applied"],
            int(kept.n),
            int(kept.size),
            newest,
            int(event_bytes),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10_000, help="the long loop's; 0 skips it")
    args = parser.parse_args()

    if args.iterations:
        loop = measure_long_loop(args.iterations)
        print(
            f"(b) long loop: {args.iterations:,} iterations, {loop.events:,} events written in {loop.write_s:.1f} s "
            f"({loop.events / loop.write_s:,.0f} events/s); {loop.behind_at_end:,} events behind at the last write, "
            f"current {loop.current_after_s:.2f} s after it; {loop.deliveries:,} deliveries, "
            f"{loop.applied:,} of them folding a batch"
        )
        print(
            f"    snapshots kept: {loop.snapshots} ({loop.snapshot_bytes:,} bytes stored; the newest one's state "
            f"{loop.snapshot_state_bytes:,} bytes as JSON); the events: {loop.event_bytes:,} bytes on disk"
        )
    backlog = measure_fold_rate(args.executions, args.threads, backlog=True)
    print(
        f"(a') burst, then its deliveries (a projector behind): {backlog.events:,} events in {backlog.writes:,} "
        f"writes; written {backlog.write_eps:,.0f} events/s, folded {backlog.fold_eps:,.0f} events/s "
        f"(per thread-second); ratio {backlog.ratio:.2f}"
    )
    rate = measure_fold_rate(args.executions, args.threads)
    print(
        f"(a) burst, a delivery after each write (a projector at the tip): {rate.events:,} events in "
        f"{rate.writes:,} writes ({args.executions} executions, {args.threads} threads); "
        f"written {rate.write_eps:,.0f} events/s, folded {rate.fold_eps:,.0f} events/s (per thread-second)"
    )
    print(f"ratio projector_fold_to_write: {rate.ratio:.2f}")


if __name__ == "__main__":
    main()
