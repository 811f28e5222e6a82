"""Replay and projector throughput on the local stack's PostgreSQL (a scratch database per run).

Three figures:

  (a) full fold: ``ReplayService.replay`` of one execution of ``--events`` events (100,000 by default)
      at its tip with no snapshot — read every event in store order, upcast, fold, checksum;
  (b) snapshot-seeded fold at the tip: the same request after the projector folded the execution and
      wrote a snapshot every ``--snapshot-every`` events — load and verify the newest snapshot, read
      and fold the events after it. Its checksum must equal (a)'s.
      Printed as ``snapshot speedup: <full ÷ seeded time>`` (goal >= 10);
  (c) projector events/s through the push endpoint: ``--executions`` executions of ``--per-execution``
      events, each event's notification POSTed (as the Pub/Sub push envelope) to the projector's Flask
      app, executions in parallel on ``--threads`` threads, each execution's events in log order.

    make up && .venv/bin/python bench/replay.py [--events 100000] [--snapshot-every 10000]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pg8000.dbapi
from pydantic import SecretStr
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
from noetl_cloud.replay.service import Cutoff, ReplayService
from noetl_cloud.replay.upcasters import default_registry
from noetl_cloud.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-push"  # noqa: S105 - the local push token of this run
TIP = Cutoff(position=2**62)


def scratch_database(url: str) -> tuple[str, pg8000.dbapi.Connection, str]:
    parsed = make_url(url)
    admin = pg8000.dbapi.connect(
        user=parsed.username, password=parsed.password, host=parsed.host, port=parsed.port, database="postgres"
    )
    admin.autocommit = True
    name = f"bench_replay_{secrets.token_hex(4)}"
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name, admin, name


def execution_events(factory: EventFactory, ids: SnowflakeGenerator, count: int) -> tuple[str, list[EventEnvelope]]:
    """``count`` events of one execution: playbook.started, then step runs of one command each."""
    eid = str(ids.next_id())
    stream = f"execution/{eid}"

    def new(event_type: str, payload: dict[str, object], agg: str = "execution", agg_id: str = eid) -> EventEnvelope:
        return factory.new(
            event_type, stream_id=stream, aggregate_type=agg, aggregate_id=agg_id, execution_id=eid, payload=payload
        )

    events = [new("playbook.started", {"path": "bench/replay", "version": 1, "entry_step": "s0", "workload": {}})]
    n = 0
    while len(events) < count:
        step, run, command = f"s{n % 50}", ids.next_str(), ids.next_str()
        base = {"command_id": command, "step": step, "attempt": 1}
        events += [
            new("step.started", {"step": step, "step_run_id": run, "args": {"n": n}}),
            new("command.issued", {**base, "kind": "step", "step_run_id": run}, "command", command),
            new("command.claimed", {**base, "worker_id": "bench"}, "command", command),
            new("command.started", {**base, "worker_id": "bench"}, "command", command),
            new("task.done", {"step": step, "status": "ok", "result": n}),
            new("command.completed", {**base, "worker_id": "bench", "status": "ok"}, "command", command),
            new("step.done", {"step": step, "step_run_id": run, "status": "ok", "result": n}),
            new("next.selected", {"from": step, "step": f"s{(n + 1) % 50}"}),
        ]
        n += 1
    return eid, events[:count]


def store_events(store: PostgresEventStore, events: list[EventEnvelope], chunk: int = 5000) -> None:
    for start in range(0, len(events), chunk):
        batch = events[start : start + chunk]
        store.append(batch[0].stream_id, batch)


def push_body(event_id: str, execution_id: str) -> dict[str, object]:
    data = json.dumps({"event_id": event_id, "execution_id": execution_id}).encode()
    return {"message": {"data": base64.b64encode(data).decode(), "messageId": event_id, "orderingKey": execution_id}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--snapshot-every", type=int, default=10_000)
    parser.add_argument("--executions", type=int, default=40)
    parser.add_argument("--per-execution", type=int, default=100)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()

    env = LocalStack.from_env({"NOETL_LOCAL_STATE_DIR": str(ROOT / "local" / ".state")}).env()
    url, admin, name = scratch_database(env["NOETL_DATABASE_URL"])
    settings = Settings(
        database_url=url,
        environment="test",
        role="projector",
        tenant_id="bench",
        organization_id="bench",
        db_pool_size=args.threads + 2,
        projector_push_token=SecretStr(TOKEN),
        internal_api_token=SecretStr(TOKEN),
        replay_snapshot_every=args.snapshot_every,
    )
    engine = create_db_engine(settings)
    try:
        upgrade(engine)
        ids = SnowflakeGenerator(7)
        factory = EventFactory(
            tenant_id="bench", organization_id="bench", producer="noetl://bench", next_id=ids.next_id
        )
        store = PostgresEventStore(engine)
        eid, events = execution_events(factory, ids, args.events)
        started = time.perf_counter()
        store_events(store, events)
        print(f"stored {len(events):,} events of execution {eid} in {time.perf_counter() - started:.1f} s")

        replay = ReplayService(engine, default_registry())
        started = time.perf_counter()
        full = replay.replay("bench", "bench", eid, TIP, use_snapshots=False)
        full_s = time.perf_counter() - started
        print(f"(a) full fold: {full.folded:,} events in {full_s:.3f} s = {full.folded / full_s:,.0f} events/s")

        role = ProjectorRole(settings)
        started = time.perf_counter()
        projected = role.projector.project("bench", "bench", eid)
        project_s = time.perf_counter() - started
        print(
            f"    projector fold + write: {projected.applied:,} events, {projected.snapshots} snapshots "
            f"in {project_s:.3f} s = {projected.applied / project_s:,.0f} events/s"
        )

        started = time.perf_counter()
        seeded = replay.replay("bench", "bench", eid, TIP)
        seeded_s = time.perf_counter() - started
        assert seeded.state.checksum() == full.state.checksum(), "seeded and full folds disagree"
        print(
            f"(b) seeded fold at the tip: snapshot at position {seeded.seeded_from}, {seeded.folded} events folded "
            f"after it, in {seeded_s:.3f} s (checksum equal to the full fold)"
        )
        print(f"snapshot speedup: {full_s / seeded_s:.1f}")

        executions = [execution_events(factory, ids, args.per_execution) for _ in range(args.executions)]
        for _eid, evs in executions:
            store_events(store, evs)
        app = build_app(role, push_auth_from_settings(settings), InternalAuth(token=SecretStr(TOKEN)))

        def push_all(item: tuple[str, list[EventEnvelope]]) -> int:
            execution_id, evs = item
            client = app.test_client()
            applied = 0
            for event in evs:
                answer = client.post(f"/?token={TOKEN}", json=push_body(event.event_id, execution_id))
                assert answer.status_code == 200, answer.get_json()
                applied += answer.get_json().get("applied", 0)
            return applied

        total = sum(len(evs) for _e, evs in executions)
        started = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            applied = sum(pool.map(push_all, executions))
        push_s = time.perf_counter() - started
        assert applied == total
        print(
            f"(c) projector push endpoint: {total:,} deliveries ({args.executions} executions x {args.per_execution}, "
            f"{args.threads} threads) in {push_s:.2f} s = {total / push_s:,.0f} events/s"
        )
        role.engine.dispose()
    finally:
        engine.dispose()
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    main()
