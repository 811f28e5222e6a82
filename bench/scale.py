"""Cost as data grows (issue #26): start throughput against the size of the tables, the projector's
fold rate against the write rate of a burst, per-iteration cost along long sequential loops, and the
bytes a 3-step execution leaves per table before and after retention.

The execute, worker and projector roles run under gunicorn (their deployables' command lines) on a
fresh database of the local stack, the Pub/Sub emulator pushing commands to the worker and events to
the projector. In order:

1. ``--sample`` 3-step noop executions run to the end, twice; once the relay deleted their published
   outbox rows and every table was vacuumed (as autovacuum does in service), the growth of every table
   (all partitions, indexes and TOAST, on disk) over the second sample divided by its size is the bytes
   per execution (the second: the pages the first one's published outbox rows and superseded row
   versions freed are reused, as in service). Their rows are kept as the seeding template. Then retention (an archive
   folder, its clock 40 days ahead) archives them and drops what nothing live needs; the bytes left
   per execution (after ``VACUUM FULL``) and the Parquet archive's bytes per execution are printed.
2. Start throughput (bench/scale_start.py: runs of ``--starts`` single ``POST /api/execute`` from 8
   threads, into a pool no worker serves, so nothing else runs) on the database when it is empty, after
   seeding to ``--executions / 3`` and after seeding to ``--executions``, each measured back to back
   with the same on a twin database kept near empty (each side with an execute and a projector role of
   its own, started together; runs interleaved twin, grown, grown, twin, six times): the ratio at a
   size is the median of the twelve adjacent pairs' grown over twin, measured seconds apart, not
   against the empty run minutes earlier on a machine whose load moves (that ratio is printed too). A
   side's projector is paused while its run is timed and folds the run's starts after it, untimed,
   before the next run begins. Beside it, the cost of one start to the control plane in this process,
   alternating grown and twin (bench/scale_inprocess.py): "in process" in the table, the twin's median
   over the grown one's. Seeding clones the template's rows (execution, stream, events, commands,
   projections) with new snowflake ids in bulk ``INSERT ... SELECT ... generate_series`` statements,
   then ``VACUUM ANALYZE`` and a checkpoint (a table in service grows gradually, autovacuum keeping up).
3. Two bursts of ``--burst`` 3-step executions through the worker, a sampler beside them
   (bench/scale_fold.py; folded: the rise of ``projection_tracking.version`` summed over the burst's
   executions). The first with the projector pushed to: events written per second over the writing span
   against events folded per second over the folding span, and how long after the last write the
   projection was current. The second with the projector's push paused while it writes: its write
   rate against the rate at which the projector, resumed, folds the whole burst
   (``ratio projector_fold_to_write``; folding beside the writes it can fold no faster than they come,
   so the first ratio reads about 1.0 whenever it keeps pace). bench/projector_fold.py measures the
   projector role alone, in process, at the tip and behind.
4. Sequential noop loops of each ``--loops`` length: per-iteration cost is the time from one
   iteration's command to the next's; the mean of the last hundred over the mean of the first hundred,
   from the second iteration on (the first command is the one delivered through Pub/Sub).

    .venv/bin/noetl-cloud local up && .venv/bin/python bench/scale.py --starts 1500   # about 16 minutes
    .venv/bin/python bench/scale.py --executions 20000 --loops 300,1000 --starts 300   # quick check
    .venv/bin/python bench/scale.py --only bytes              # step 1 alone: the bytes table, in about a minute
    .venv/bin/python bench/scale.py --only fold [--burst 500]  # step 3 alone (about two minutes)
    .venv/bin/python bench/scale.py --only loop [--loops 10000]  # step 4 alone, on the empty database
    .venv/bin/python bench/scale.py --only loop --grow --loops 10000  # step 4 on a database seeded to 300k

Ends with ``ratio start_300k``, ``ratio projector_fold_to_write``, ``ratio loop_last_to_first`` (the
longest loop) and ``bytes per execution`` (before retention). Never fails on timing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import urllib3
from sqlalchemy import Engine, create_engine, text

from distributed import PLAYBOOK, PROJECT, pubsub, push_subscription, start_role
from noetl_cloud.db.engine import normalize_url
from noetl_cloud.envelope import utc_now
from noetl_cloud.local.process import stop_group, wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.retention.partitions import ensure_ahead
from noetl_cloud.retention.service import RetentionService
from noetl_cloud.settings import Settings
from noetl_cloud.web.client import ApiClient, static_token
from scale_db import CLONED, TABLES, fresh_database, scalar, seed, settle, table_bytes, wait_folded
from scale_fold import fold_against_write, fold_behind, print_fold
from scale_start import IDLE_POOL, ROUNDS, THREADS, Side, back_to_back, in_process, paused, start_rate

TOKEN = secrets.token_hex(16)
TWIN_DB = "bench_scale_twin"
IN_PROCESS = 300  # starts a side of the in-process measure (bench/scale_inprocess.py)
LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop{n}, path: bench/loop{n}}}
workflow:
  - step: each
    loop:
      spec: {{mode: sequential}}
      in: "{{{{ range({n}) | list }}}}"
      iterator: i
    tool: {{kind: noop, result: "{{{{ iter.i }}}}"}}
"""


class Api:
    """The control plane, through the product's own client (web/client.py): it opens a new connection
    when the server closed a kept-alive one (gunicorn closes them after 2 idle seconds), where a bare
    urllib3 pool raised "Connection reset by peer" in the middle of a run."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.api = ApiClient(base, token_source=static_token(TOKEN), timeout_s=60, pool_maxsize=16)
        self.http = urllib3.PoolManager(maxsize=1)
        self.auth = {"Authorization": f"Bearer {TOKEN}"}

    def register(self, playbook: str) -> None:
        answer = self.http.request(
            "POST", self.base + "/api/catalog", body=playbook, headers={**self.auth, "Content-Type": "application/yaml"}
        )
        assert answer.status in (200, 201), answer.data

    def start(self, path: str, pool: str | None = None) -> str:
        body: dict[str, Any] = {"path": path}
        if pool:
            body["execution_pool"] = pool
        answer = self.api.post("/api/execute", body)
        assert answer.status in (200, 201, 202), answer.json
        return str(answer.json["execution_id"])

    def batch(self, path: str, n: int) -> list[str]:
        started: list[str] = []
        for offset in range(0, n, 100):
            size = min(100, n - offset)
            body = {"executions": [{"path": path, "workload": {"i": offset + i}} for i in range(size)]}
            answer = self.api.post("/api/execute/batch", body)
            assert answer.status == 200, answer.json
            started += [str(r["execution_id"]) for r in answer.json["results"]]
        return started


def wait_ended(engine: Engine, ids: list[str], timeout: float) -> None:
    def ended() -> bool:
        n = scalar(
            engine,
            "SELECT count(*) FROM execution WHERE execution_id = ANY(CAST(:ids AS bigint[])) AND ended_at IS NOT NULL",
            ids="{" + ",".join(ids) + "}",
        )
        return int(n) >= len(ids)

    if not wait_until(ended, timeout=timeout, interval=0.2):
        raise SystemExit(f"{len(ids)} executions did not end within {timeout:.0f} s")


# -- 1. bytes per execution, before and after retention ---------------------------------------------


def _run_sample(api: Api, engine: Engine, sample: int) -> list[str]:
    """``sample`` 3-step executions run to their end, their outbox rows published and deleted, their
    projection folded, and every table vacuumed (what autovacuum does within a minute in service: the
    outbox keeps only what is still to publish, and the pages its published rows and the superseded
    versions of updated rows (commands, executions, streams, projections) held are reused by the next
    executions)."""
    ids = api.batch("bench/three", sample)
    wait_ended(engine, ids, timeout=600)
    if not wait_until(lambda: scalar(engine, "SELECT count(*) FROM outbox") == 0, timeout=120, interval=0.5):
        print(f"  note: {scalar(engine, 'SELECT count(*) FROM outbox')} outbox rows still there after 120 s")
    wait_folded(engine, ids, timeout=120)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in TABLES:
            conn.execute(text(f"VACUUM {table}"))
    return ids


def bytes_per_execution(api: Api, engine: Engine, settings: Settings, sample: int) -> dict[str, Any]:
    # Measured on the second of two samples: the tables in service, not their first pages (the outbox's
    # pages, freed by the first sample's published rows, are reused by the second's, as in service).
    empty = table_bytes(engine)
    _run_sample(api, engine, sample)
    before = table_bytes(engine)
    ids = _run_sample(api, engine, sample)
    after = table_bytes(engine)
    per_table = {t: (after[t] - before[t]) / sample for t in TABLES}
    counts = {
        t: int(scalar(engine, f"SELECT count(*) FROM {t} WHERE execution_id = :e", e=int(ids[0])))
        for t in ("event", "command", "projection")
    }
    template = ids[0]
    with engine.begin() as conn:  # the seeding template, kept before retention removes the rows
        for table, _id, _cols in CLONED:
            where = "stream_id = :s" if table == "stream" else "execution_id = :e"
            conn.execute(
                text(f"CREATE TABLE tpl_{table} AS SELECT * FROM {table} WHERE {where}"),
                {"e": int(template), "s": f"execution/{template}"},
            )
    archive_dir = Path(tempfile.mkdtemp(prefix="scale-archive-"))
    swept = settings.model_copy(
        update={
            "payload_backend": "filesystem",
            "payload_dir": str(archive_dir / "p"),
            "archive_dir": str(archive_dir / "a"),
            "retention_batch": max(2 * sample, 1),  # both samples
        }
    )
    result = RetentionService(engine, swept).sweep(now=utc_now() + timedelta(days=40))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in TABLES:
            conn.execute(text(f"VACUUM FULL {table}"))
    left = table_bytes(engine)
    with engine.begin() as conn:  # its clock ran 40 days ahead: today's partitions (dropped, empty) again
        ensure_ahead(conn, settings.partition_days_ahead, utc_now())
    archived = sum(f.stat().st_size for f in (archive_dir / "a").rglob("*") if f.is_file())
    return {
        "per_table": per_table,
        "total": sum(per_table.values()),
        "counts": counts,
        "template": template,
        "after": {t: max(0.0, (left[t] - empty[t]) / (2 * sample)) for t in TABLES},
        "archived_per_execution": archived / (2 * sample),
        "retention": result,
    }


# -- 2. start throughput at growing sizes ---------------------------------------------------------


def start_side(
    name: str,
    url: str,
    common: dict[str, str],
    port: int,
    pubsub_clients: tuple[Any, Any],
    cleanup: tuple[list[Any], list[str]],
) -> tuple[Side, dict[str, str]]:
    """A database of step 2 (bench/scale_start.py) with an execute role (``port``) and a projector role
    (``port + 1``) of its own, on an events topic of its own, started into the pool no worker serves. Both
    sides get theirs together, so neither side's processes carry the history of steps before (step 1
    ran through the first roles). Its processes and subscription go to ``cleanup``. The side, and its
    roles' environment."""
    publisher, subscriber = pubsub_clients
    procs, subs = cleanup
    topic = f"{common['NOETL_EVENTS_TOPIC']}-{name}"
    publisher.create_topic(name=f"projects/{PROJECT}/topics/{topic}")
    side_env = {**common, "NOETL_DATABASE_URL": url, "NOETL_EVENTS_TOPIC": topic}
    procs.append(start_role("execute", side_env, port, workers=2, threads=8))
    procs.append(start_role("projector", side_env, port + 1, workers=1, threads=8))
    subs.append(push_subscription(subscriber, topic, f"{topic}-p", f"http://127.0.0.1:{port + 1}/?token={TOKEN}"))
    api = Api(f"http://127.0.0.1:{port}")
    api.register(PLAYBOOK)  # the twin's first; the grown database has it (the same content: no new version)
    engine = create_engine(normalize_url(url), pool_size=2)
    return Side(name, lambda: api.start("bench/three", IDLE_POOL), engine, subscriber, subs[-1]), side_env


# -- 3. projector fold rate against the write rate of a burst -------------------------------------


def projector_process(projector: str) -> dict[str, Any]:
    """The projector role's process counters (deliveries, applied events, duplicates)."""
    answer = ApiClient(projector, token_source=static_token(TOKEN), timeout_s=30).get("/api/projector/status")
    assert answer.status == 200, answer.json
    return dict(answer.json["process"])


def burst(api: Api, engine: Engine, n: int, projector: str, pause: Callable[[], Any]) -> dict[str, Any]:
    """Step 3 (bench/scale_fold.py): ``n`` 3-step executions through the worker, the projector beside;
    then ``n`` more with its push paused (``pause``) while they are written."""
    with engine.connect() as conn:  # the scope of the bench's executions (the warm-up's, the samples')
        row = conn.execute(text("SELECT tenant_id, organization_id FROM execution LIMIT 1")).one()
    scope = (row[0], row[1])

    def run() -> list[str]:
        return api.batch("bench/three", n)

    def ended(ids: list[str]) -> None:
        wait_ended(engine, ids, timeout=900)

    beside = fold_against_write(run, ended, engine, scope, lambda: projector_process(projector))
    return {**beside, "behind": fold_behind(run, ended, engine, scope, pause)}


# -- 4. sequential loops --------------------------------------------------------------------------


def loop_cost(api: Api, engine: Engine, n: int) -> dict[str, Any]:
    api.register(LOOP.format(n=n))
    eid = api.start(f"bench/loop{n}")
    wait_ended(engine, [eid], timeout=max(600.0, n * 0.2))
    with engine.connect() as conn:
        issued = [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT created_at FROM command WHERE execution_id = :e AND kind = 'iteration' ORDER BY iteration"
                ),
                {"e": int(eid)},
            )
        ]
    # Not the first step: the loop's first command reaches the worker through its topic (a Pub/Sub push,
    # 0.1-0.6 s here), every later one in the answer to the worker's report (eager dispatch, within its
    # budget): counted, that one delivery made the first hundred look up to twice as costly.
    steps = [(b - a).total_seconds() for a, b in itertools.pairwise(issued)][1:]
    head, tail = steps[:100], steps[-100:]
    tenth = max(1, len(steps) // 10)  # the shape along the loop: the median step of each tenth
    return {
        "iterations": len(issued),
        "first_ms": statistics.mean(head) * 1000,
        "last_ms": statistics.mean(tail) * 1000,
        "ratio": statistics.mean(tail) / statistics.mean(head),
        "tenths_ms": [statistics.median(steps[i : i + tenth]) * 1000 for i in range(0, tenth * 10, tenth)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=300_000, help="the largest size seeded")
    parser.add_argument("--sample", type=int, default=300, help="3-step executions measured for bytes")
    parser.add_argument("--starts", type=int, default=1000, help="executions started per throughput run")
    parser.add_argument("--burst", type=int, default=500, help="3-step executions of the projector burst")
    parser.add_argument("--loops", default="2000,10000", help="sequential loop lengths, comma-separated")
    parser.add_argument(
        "--only",
        choices=("bytes", "fold", "loop"),
        help="bytes: step 1 alone (no seeding, burst or loops), its table and last line; fold: step 3 alone "
        "(after a warm-up of 50 executions), the burst and the ratio projector_fold_to_write; loop: step 4 "
        "alone, on the empty database, and the ratio loop_last_to_first",
    )
    parser.add_argument(
        "--grow",
        action="store_true",
        help="with --only loop: step 1, then the database seeded to --executions before the loops (step 4 "
        "as the full run meets it, in about a third of the time)",
    )
    args = parser.parse_args()
    loops = [int(n) for n in args.loops.split(",") if n]

    env = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    publisher, subscriber = pubsub(env)
    # A run stopped by a signal deletes its subscriptions (the finally below); one killed harder left them
    # pushing its backlog to these ports, into this run's roles: they go first.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for stale in subscriber.list_subscriptions(request={"project": f"projects/{PROJECT}"}):  # type: ignore[attr-defined]
        if stale.name.rsplit("/", 1)[-1].startswith("scale-"):
            subscriber.delete_subscription(subscription=stale.name)  # type: ignore[attr-defined]
    url = fresh_database(env["NOETL_DATABASE_URL"])
    prefix = f"scale-{secrets.token_hex(3)}-commands-"
    events_topic = prefix.removesuffix("-commands-") + "-events"
    for topic in (f"{prefix}shared", f"{prefix}{IDLE_POOL}", events_topic):
        publisher.create_topic(name=f"projects/{PROJECT}/topics/{topic}")  # type: ignore[attr-defined]
    port = int(os.environ.get("NOETL_LOCAL_PORT_BASE", "15430")) + 70
    common = {
        **env,
        "NOETL_DATABASE_URL": url,
        "NOETL_PROJECT_ID": PROJECT,
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic,
        "NOETL_POOLS": f"shared,{IDLE_POOL}",
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_PROJECTOR_PUSH_TOKEN": TOKEN,
        "NOETL_LOG_LEVEL": "WARNING",
        # The product's defaults whatever the stack runs with (it records spans locally, and a traced
        # execution stores its trace context in its rows): bench/telemetry.py prices telemetry on its own.
        "NOETL_TRACING": "off",
        "NOETL_METRICS": "off",
    }
    procs: list[subprocess.Popen[bytes]] = [start_role("execute", common, port, workers=2, threads=8)]
    worker_env = {**common, "NOETL_API_URL": f"http://127.0.0.1:{port}", "NOETL_WORKER_PUSH_TOKEN": TOKEN}
    procs.append(start_role("worker", {**worker_env, "NOETL_WORKER_ID": "scale-worker"}, port + 1, 2, 8))
    procs.append(start_role("projector", common, port + 2, workers=1, threads=8))
    subs = [
        push_subscription(
            subscriber, f"{prefix}shared", f"{prefix}shared-w", f"http://127.0.0.1:{port + 1}/?token={TOKEN}"
        ),
        push_subscription(subscriber, events_topic, f"{events_topic}-p", f"http://127.0.0.1:{port + 2}/?token={TOKEN}"),
    ]
    engine = create_engine(normalize_url(url), pool_size=4)
    api = Api(f"http://127.0.0.1:{port}")

    def projector_paused() -> Any:
        return paused(subscriber, subs[1])

    settings = Settings(database_url=url)
    try:
        api.register(PLAYBOOK)
        if args.only == "fold":
            wait_ended(engine, api.batch("bench/three", 50), timeout=300)  # warm: connections, statements
            print_fold(args.burst, burst(api, engine, args.burst, f"http://127.0.0.1:{port + 2}", projector_paused))
            return
        if args.only == "loop" and not args.grow:
            print_loops({n: loop_cost(api, engine, n) for n in loops})
            return
        size = bytes_per_execution(api, engine, settings, args.sample)
        if args.only == "loop":
            seed(engine, size["template"], 0, args.executions)  # vacuumed, analyzed, checkpointed after
            print(f"progress: seeded {args.executions} executions", flush=True)
            print_loops({n: loop_cost(api, engine, n) for n in loops})
            return
        print(f"progress: bytes per execution {size['total']:.0f} before retention", flush=True)
        if args.only == "bytes":
            print_bytes(args.sample, size)
            return
        settle(engine)
        clients, cleanup = (publisher, subscriber), (procs, subs)
        grown, grown_env = start_side("grown", url, common, port + 3, clients, cleanup)
        twin_url = fresh_database(env["NOETL_DATABASE_URL"], TWIN_DB)
        twin, twin_env = start_side("twin", twin_url, common, port + 5, clients, cleanup)
        for warmed in (grown, twin):  # warm: connections, prepared statements, the catalog cache
            start_rate(warmed, max(50, args.starts // 5))
        rates = {0: back_to_back(grown, twin, args.starts)}
        costs = {0: in_process(grown, twin, (grown_env, twin_env), IN_PROCESS)}
        mid = args.executions // 3
        seeded = 0
        for target in (mid, args.executions):
            begin = time.perf_counter()
            seed(engine, size["template"], seeded, target - seeded)
            print(f"seeded {target - seeded} executions in {time.perf_counter() - begin:.1f} s", flush=True)
            seeded = target
            rates[target] = back_to_back(grown, twin, args.starts)
            costs[target] = in_process(grown, twin, (grown_env, twin_env), IN_PROCESS)
            at = rates[target]
            print(f"progress: start throughput at {target}: {at['grown']:.1f}/s (twin: {at['twin']:.1f}/s)", flush=True)
        fold = burst(api, engine, args.burst, f"http://127.0.0.1:{port + 2}", projector_paused)
        behind = fold["behind"]
        print(f"progress: fold {behind['folded_per_s']:.0f}/s, write {behind['written_per_s']:.0f}/s", flush=True)
        loop_results = {}
        for n in loops:
            loop_results[n] = loop_cost(api, engine, n)
            print(f"progress: loop of {n}: ratio {loop_results[n]['ratio']:.2f}", flush=True)
        event_rows = scalar(engine, "SELECT count(*) FROM event")
    finally:
        for sub in subs:
            subscriber.delete_subscription(subscription=sub)  # type: ignore[attr-defined]
        engine.dispose()
        for proc in reversed(procs):
            stop_group(proc.pid)
            proc.wait()

    print_bytes(args.sample, size, last=False)
    print(
        f"start throughput (median of {2 * ROUNDS} runs a side of {args.starts} single starts, {THREADS} threads, "
        f"back to back with the twin database, the projectors paused while timed; the ratio is the median of the "
        f"{2 * ROUNDS} adjacent pairs'; {event_rows} event rows at the end):"
    )
    for n, at in rates.items():
        print(
            f"  at {n:>8} executions: {at['grown']:7.1f}/s, twin {at['twin']:7.1f}/s: ratio {at['ratio']:.2f}"
            f"   (to this database's own run at 0, minutes earlier: {at['grown'] / rates[0]['grown']:.2f}; in "
            f"process: {costs[n]:.2f})"
        )
    print_fold(args.burst, fold, ratio=False)
    print_loops(loop_results, last=False)
    if args.executions != 300_000:
        print(f"(start_300k below is measured at {args.executions} executions: --executions)")
    print(f"ratio start_300k: {rates[args.executions]['ratio']:.2f}")
    print(f"ratio projector_fold_to_write: {fold['behind']['folded_per_s'] / fold['behind']['written_per_s']:.2f}")
    print_loops(loop_results, table=False)
    print(f"bytes per execution: {round(size['total'])}")


def print_loops(results: dict[int, dict[str, Any]], *, table: bool = True, last: bool = True) -> None:
    """Step 4's lines; with ``last``, the ``ratio loop_last_to_first`` line (the longest loop's)."""
    for n, r in results.items() if table else ():
        print(
            f"sequential loop of {n}: first hundred {r['first_ms']:.1f} ms/iteration, last hundred "
            f"{r['last_ms']:.1f} ms/iteration, ratio {r['ratio']:.2f} ({r['iterations']} iterations); median "
            "step of each tenth: " + ", ".join(f"{ms:.2f}" for ms in r["tenths_ms"]) + " ms"
        )
    if not last:
        return
    if not results:
        print("(no loop was run, --loops is empty: loop_last_to_first below is 0)")
    largest = results[max(results)] if results else {"ratio": 0.0}
    print(f"ratio loop_last_to_first: {largest['ratio']:.2f}")


def print_bytes(sample: int, size: dict[str, Any], *, last: bool = True) -> None:
    """Step 1's table; with ``last``, the ``bytes per execution`` line too (``--only bytes``)."""
    counts = size["counts"]
    print(
        f"bytes per 3-step execution ({sample} run through the worker; {counts['event']} events, "
        f"{counts['command']} commands, {counts['projection']} projection rows each), on disk, after the "
        "published outbox rows are gone:"
    )
    for table in TABLES:
        print(f"  {table:20} {size['per_table'][table]:10.0f}   after retention {size['after'][table]:8.0f}")
    print(
        f"  {'total':20} {size['total']:10.0f}   after retention {sum(size['after'].values()):8.0f}"
        f"   (archive: {size['archived_per_execution']:.0f} bytes of Parquet per execution)"
    )
    print(f"  retention sweep: {size['retention']}")
    if last:
        print(f"bytes per execution: {round(size['total'])}")


if __name__ == "__main__":
    main()
