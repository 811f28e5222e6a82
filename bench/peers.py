"""Ours beside a PostgreSQL job queue (procrastinate 3.x) in one run: start, batch, chain and webhook paths.

Both sides run on the local stack's PostgreSQL, each in a database of its own (fresh for each path), on
the same cores, served the same way (gunicorn, 2 workers x 8 threads) and driven by the same client
(urllib3's keep-alive pool, 4 threads). Rounds are interleaved (ours, then the peer; 3 rounds) and
every figure is the median of the rounds. The paths:

  (a) start one execution: ``POST /api/execute`` to the execute role, against a Flask app calling
      procrastinate's ``defer``;
  (b) batches of 100: ``POST /api/execute/batch`` against ``batch_defer`` behind the Flask app;
  (c) a 3-step noop chain, 200 started at once (workflows/s, per-step p50/p95), then 20 one at a
      time (per-step p50): execute + worker with the Pub/Sub emulator pushing commands to the worker,
      against procrastinate tasks that each defer the next, run by procrastinate workers with the
      concurrency of our worker role;
  (d) an HMAC-signed webhook to durable work: our ingress role forwarding to execute, against the
      Flask app verifying the HMAC and deferring. Every delivery is a body never sent before (a
      counter in it), signed as it is sent, on both sides: the ingress answers a body it already
      took ``duplicate`` (replay protection), which would measure the replay path instead.

Beside each rate, the CPU per item (utime + stime from /proc) of the side's server process groups,
of the PostgreSQL backends connected to its database, and (ours) of the Pub/Sub emulator, a private
instance this run starts so that its CPU is ours alone. The output ends with one ``ratio <path>:
ours/peer`` line per path (throughput) and ``latency ratio chain_step`` (ours/peer per-step p50, one
chain at a time).

    make up && .venv/bin/pip install -e '.[dev,bench]' && .venv/bin/python bench/peers.py [--seconds 8]

Prints figures and ratios; never fails on timing. Sends traffic to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from noetl_cloud.local.stack import LocalStack
from peers_common import Chain, Processes, Signer, Window, drop_database, median, percentile

ROOT = Path(__file__).resolve().parent.parent
PATHS = {"a": "start", "b": "batch", "c": "chain", "d": "webhook"}
TITLES = {
    "a": "(a) start one execution over HTTP, c=4 keep-alive  [ours: POST /api/execute | peer: Flask -> defer]",
    "b": "(b) batches of 100 over HTTP, c=4  [ours: POST /api/execute/batch | peer: Flask -> batch_defer]",
    "c": "(c) 3-step noop chain  [ours: execute + worker, emulator push | peer: tasks deferring the next]",
    "d": "(d) HMAC-signed webhook -> durable work, c=4  [ours: ingress -> execute | peer: Flask verify -> defer]",
}
UNITS = {"a": "executions/s", "b": "executions/s", "d": "webhooks/s"}
LOAD, ALONE = 200, 20
SECRET = "bench-secret"  # noqa: S105 - the benchmark's own throwaway webhook secret


def signer() -> Signer:
    """Signed webhook deliveries, each body unique (a counter in it): the ingress keys replay
    protection on an HMAC body's digest, so one body posted again would be answered ``duplicate``
    and run nothing. Both sides sign (and verify) every delivery: the same work per request."""
    run, counter = secrets.token_hex(4), itertools.count()  # unique across rounds too (one replay window)

    def sign() -> tuple[bytes, str]:
        order = {"id": f"{run}-{next(counter)}", "items": [1, 2, 3]}
        body = json.dumps({"event": "order.created", "order": order}).encode()
        return body, hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()

    return sign


def stack_env() -> dict[str, str]:
    """The running local stack's connection settings; exits unless its PostgreSQL is healthy."""
    stack = LocalStack.from_env({"NOETL_LOCAL_STATE_DIR": str(ROOT / "local" / ".state"), **os.environ})
    if "postgres" not in {s.name for s in stack.status() if s.healthy}:
        raise SystemExit("the local stack's PostgreSQL is not up: `make up` first")
    return stack.env()


def measure(side: Any, path: str, seconds: float) -> Window | Chain:
    if path == "a":
        return side.start_one(seconds)
    if path == "b":
        return side.batch(seconds)
    if path == "c":
        return side.chain(LOAD, ALONE)
    return side.webhook(seconds, signer())


def progress(path: str, round_: int, rounds: int, side: str, got: Window | Chain) -> None:
    if isinstance(got, Chain):
        p50 = percentile(got.steps_alone, 0.5) * 1000
        line = f"{got.rate:8.1f} workflows/s, alone per-step p50 {p50:.1f} ms, not completed {got.not_completed}"
    else:
        line = f"{got.rate:8.0f} items/s, non-2xx {got.errors()}"
    cpu = got.per_item_ms()
    print(f"  ({path}) round {round_}/{rounds} {side:<13} {line}, CPU {cpu:.2f} ms/item", flush=True)


# -- the report -----------------------------------------------------------------------------------


def _ratio(ours: float, peer: float) -> float:
    return ours / peer if peer else float("nan")


def _row(label: str, ours: float, peer: float | None, fmt: str, ratio: bool = True) -> str:
    shown = "-" if peer is None else format(peer, fmt)
    tail = f"{_ratio(ours, peer):10.2f}" if ratio and peer is not None else ""
    return f"  {label:<44} {format(ours, fmt):>12} {shown:>14} {tail}".rstrip()


def cpu_rows(ours: list[Any], peer: list[Any], unit: str) -> list[str]:
    def med(runs: list[Any], category: str | None) -> float:
        return median([r.per_item_ms(category) for r in runs])

    roles = sorted({k for r in ours for k in r.cpu if k.startswith("servers:")})
    return [
        _row(f"CPU/{unit} servers (ms)", med(ours, "servers"), med(peer, "servers"), ".3f"),
        *(
            _row(f"  of which our {role.split(':', 1)[1]} role (ms)", med(ours, role), None, ".3f")
            for role in (roles if len(roles) > 1 else [])
        ),
        _row(f"CPU/{unit} PostgreSQL (ms)", med(ours, "postgres"), med(peer, "postgres"), ".3f"),
        _row(f"CPU/{unit} Pub/Sub emulator (ms)", med(ours, "emulator"), None, ".3f"),
        _row(f"CPU/{unit} all of the above (ms)", med(ours, None), med(peer, None), ".3f"),
    ]


def window_table(path: str, ours: list[Window], peer: list[Window], seconds: float) -> list[str]:
    rates = ([r.rate for r in ours], [r.rate for r in peer])

    def spread(values: list[float]) -> str:
        return "/".join(f"{v:.0f}" for v in values)

    def stored(runs: list[Window]) -> float:
        return sum(r.stored or 0 for r in runs) / max(sum(r.items for r in runs), 1)

    return [
        TITLES[path] + f"; {seconds:g} s windows",
        f"  {'':<44} {'ours':>12} {'procrastinate':>14} {'ours/peer':>10}",
        _row(f"{UNITS[path]} (median)", median(rates[0]), median(rates[1]), ".1f"),
        f"  {'  per round':<44} {spread(rates[0]):>12} {spread(rates[1]):>14}",
        *cpu_rows(ours, peer, "item"),
        _row(
            "client CPU/item (ms, not counted above)",
            median([r.client_cpu * 1000 / max(r.items, 1) for r in ours]),
            median([r.client_cpu * 1000 / max(r.items, 1) for r in peer]),
            ".3f",
            ratio=False,
        ),
        _row("non-2xx answers (all rounds)", sum(r.errors() for r in ours), sum(r.errors() for r in peer), "d", False),
        _row("rows stored / items accepted", stored(ours), stored(peer), ".3f", ratio=False),
    ]


def chain_table(ours: list[Chain], peer: list[Chain]) -> list[str]:
    def ms(runs: list[Chain], attr: str, q: float) -> float:
        return median([percentile(getattr(r, attr), q) * 1000 for r in runs])

    return [
        TITLES["c"],
        f"  {'':<44} {'ours':>12} {'procrastinate':>14} {'ours/peer':>10}",
        _row(
            f"workflows/s, {LOAD} started at once",
            median([r.rate for r in ours]),
            median([r.rate for r in peer]),
            ".1f",
        ),
        _row("  per-step p50 under that load (ms)", ms(ours, "steps_load", 0.5), ms(peer, "steps_load", 0.5), ".1f"),
        _row("  per-step p95 under that load (ms)", ms(ours, "steps_load", 0.95), ms(peer, "steps_load", 0.95), ".1f"),
        _row(
            f"per-step p50, {ALONE} chains one at a time (ms)",
            ms(ours, "steps_alone", 0.5),
            ms(peer, "steps_alone", 0.5),
            ".1f",
        ),
        _row("  the emulator's push alone, p50 (ms)", ms(ours, "push", 0.5), None, ".1f"),
        _row(
            f"whole chain p50, {ALONE} one at a time (ms)",
            ms(ours, "chains_alone", 0.5),
            ms(peer, "chains_alone", 0.5),
            ".1f",
        ),
        *cpu_rows(ours, peer, "workflow"),
        _row(
            "chains not completed (all rounds)",
            sum(r.not_completed for r in ours),
            sum(r.not_completed for r in peer),
            "d",
            False,
        ),
        _row(
            "steps measured (all rounds)",
            sum(len(r.steps_load) + len(r.steps_alone) for r in ours),
            sum(len(r.steps_load) + len(r.steps_alone) for r in peer),
            "d",
            False,
        ),
    ]


def report(results: dict[str, dict[str, list[Any]]], args: argparse.Namespace, procs: Processes) -> None:
    print()
    print(f"machine: {os.cpu_count()} cores, shared by both sides (no pinning), PostgreSQL of the local stack")
    print("servers: gunicorn 2 workers x 8 threads each (our roles; the peer's Flask app); client: urllib3 keep-alive")
    print(
        "chain workers: ours, the worker role (2 x 8 threads, the emulator pushing to it); peer, 2 procrastinate"
        " worker processes x concurrency 8 = 16 jobs at once, woken by LISTEN/NOTIFY"
    )
    print(
        "CPU counts (utime+stime from /proc, per item): the side's server process groups (gunicorn masters and"
        " workers; in (c) also the peer's worker processes), the PostgreSQL backends connected to the side's"
        " database (not the benchmark's own connection, not the WAL writer/bgwriter/checkpointer, which serve"
        " every database), and for ours the private Pub/Sub emulator's JVM; the load generator is apart"
    )
    print(f"load average at the end (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for path, sides in results.items():
        ours, peer = sides["ours"], sides["peer"]
        print()
        lines = chain_table(ours, peer) if path == "c" else window_table(path, ours, peer, args.seconds)
        print("\n".join(lines))
    problems = procs.problems()
    print()
    if problems:
        for name, (count, first) in problems.items():
            print(f"log {name}: {count} warning/error lines, e.g.: " + " | ".join(line[:200] for line in first))
        print(f"logs kept in {procs.log_dir}")
    else:
        print("server logs: no warning or error lines (WARNING, ERROR, CRITICAL, Traceback)")
    if "a" in results:
        runs = results["a"]["ours"]
        names = {"servers": "execute role", "postgres": "PostgreSQL", "emulator": "Pub/Sub emulator"}
        parts = " + ".join(f"{name} {median([r.per_item_ms(k) for r in runs]):.2f}" for k, name in names.items())
        total = median([r.per_item_ms() for r in runs])
        bare = median([r.per_item_ms() - r.per_item_ms("emulator") for r in runs])
        print(
            f"CPU per started execution across all processes: {total:.2f} ms ({parts}; without the emulator"
            f" {bare:.2f} ms; target <= 2.5 ms)"
        )
    for path, sides in results.items():
        rates = (median([r.rate for r in sides[s]]) for s in ("ours", "peer"))
        print(f"ratio {PATHS[path]}: {_ratio(*rates):.3f}")
    if "c" in results:
        ours, peer = (median([percentile(r.steps_alone, 0.5) for r in results["c"][s]]) for s in ("ours", "peer"))
        print(f"latency ratio chain_step: {_ratio(ours, peer):.3f}")


# -- main ---------------------------------------------------------------------------------------


def _terminated(_signum: int, _frame: object) -> None:
    raise SystemExit(143)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8, help="each measurement window of (a), (b), (d)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="a,b,c,d", help="a subset of the paths, e.g. a,c")
    args = parser.parse_args()
    paths = [p for p in PATHS if p in args.only.split(",")]
    if not paths:
        parser.error("--only names none of a, b, c, d")
    if importlib.util.find_spec("procrastinate") is None:
        print("procrastinate is not installed: .venv/bin/pip install -e '.[dev,bench]'", file=sys.stderr)
        return 2

    from peers_ours import Ours
    from peers_peer import Peer

    stack = stack_env()
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    procs = Processes(Path(tempfile.mkdtemp(prefix="bench-peers-")))
    results: dict[str, dict[str, list[Any]]] = {p: {"ours": [], "peer": []} for p in paths}
    sides: list[Any] = []
    ok = False
    try:
        sides = [Ours(procs, stack, SECRET)]
        sides.append(Peer(procs, stack, SECRET))
        print(f"paths {','.join(paths)}, {args.rounds} rounds, windows of {args.seconds:g} s", flush=True)
        for path in paths:
            for side in sides:
                side.fresh()
            for n in range(1, args.rounds + 1):
                for key, side in zip(("ours", "peer"), sides, strict=True):
                    side.tag = f"{path}{n}"
                    got = measure(side, path, args.seconds)
                    results[path][key].append(got)
                    progress(path, n, args.rounds, side.name, got)
        ok = True
    finally:
        if not ok:
            print(f"stopped early; the servers' logs are kept in {procs.log_dir}", file=sys.stderr)
        try:
            for side in sides:  # before the processes: ours deletes its topics on its emulator
                side.close()
        finally:
            procs.stop_all()
            for database in ("bench_peers_ours", "bench_peers_peer"):
                drop_database(stack["NOETL_DATABASE_URL"], database)
    report(results, args, procs)
    if ok and not procs.problems():
        shutil.rmtree(procs.log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
