"""Spool write and drain throughput on the GCS emulator, against raw uploads measured in the same run.

Three figures, each with the same number of threads and 1 KiB payloads on fake-gcs-server:

  (a) raw uploads/s: ``blob.upload_from_string`` of 1 KiB objects (the baseline);
  (b) spool writes/s: ``SpoolEngine.spool`` on the GCS backend -- retention check (listed at most
      every 5 s), one create-only object (``ifGenerationMatch=0``), the backlog mark and the
      ``spooled`` event (coordination store and event log in memory: this measures the spool);
  (c) drain replays/s: ``Drainer.drain`` of those items to a control plane that answers at once
      (list, read, replay, delete per item, one lease renewal per item).

Goal: b / a >= 0.7, printed as ``spool write ratio: <writes / raw>``.

    make up && .venv/bin/python bench/spool.py [--count 400] [--threads 8]

Prints figures and the ratio; never fails on timing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.gcs import GcsSpool
from noetl_cloud.spool.item import SpoolItem
from noetl_cloud.spool.replayer import ReplayResult
from noetl_cloud.spool.target import SpoolTarget

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "noetl-local"
PAYLOAD = b"x" * 1024
PLAN = {"playbook": "bench/noop", "request": {"path": "bench/noop"}}


def timed(count: int, threads: int, work: Callable[[int], object]) -> float:
    """Operations per second of ``work(i)`` for ``i`` in ``range(count)`` on ``threads`` threads."""
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(count)))
    return count / (time.perf_counter() - start)


class Immediate:
    """A control plane that accepts every replay at once."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)

    def replay(self, item: SpoolItem, payload: bytes) -> ReplayResult:
        return ReplayResult("replayed", str(next(self.ids)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()

    env = LocalStack.from_env(
        {**os.environ, "NOETL_LOCAL_STATE_DIR": os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))}
    ).env()
    endpoint = env["STORAGE_EMULATOR_HOST"]
    raw = storage.Client(project=PROJECT, credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint})
    bucket_name = f"bench-spool-{secrets.token_hex(4)}"
    bucket = raw.create_bucket(bucket_name)

    def upload(prefix: str) -> Callable[[int], object]:
        return lambda i: bucket.blob(f"{prefix}/{i:08d}").upload_from_string(PAYLOAD)

    # Warm the pools on as many threads as measured; the baseline is the better of two runs, one
    # before and one after the spool's, so a warming emulator cannot flatter the ratio.
    timed(args.threads * 4, args.threads, upload("warm"))
    raw_rates = [timed(args.count, args.threads, upload("raw-1"))]

    spool = GcsSpool(bucket_name, endpoint=endpoint, project_id=PROJECT)
    kv = InMemoryKeyValueStore()
    ids = SnowflakeGenerator(1)
    engine = SpoolEngine(kv, EventJournal(MemoryEventSink(), kv), FixedBackend(spool, "gcs"), ids=ids.next_id)
    block = {"mode": "buffer_and_ack", "backend": "gcs", "ordering": "per_key", "ordering_key": "x-device"}
    block["drain"] = {"rate_per_sec": 1_000_000}
    target = SpoolTarget.from_spec("bench/devices", block, source_kind="push", downstream="execute:bench")

    def write(i: int) -> object:
        return engine.spool(
            target,
            PAYLOAD,
            message_id=f"m{i}",
            source="webhook",
            plan=PLAN,
            reason="circuit_open",
            ordering_key=f"dev-{i % args.threads}",
        )

    timed(args.threads * 4, args.threads, lambda i: write(-1 - i))
    spool_rate = timed(args.count, args.threads, write)
    raw_rates.append(timed(args.count, args.threads, upload("raw-2")))
    raw_rate = max(raw_rates)

    start = time.perf_counter()
    report = Drainer(engine, Immediate(), budget_s=3600).drain(target)
    drain_rate = report.replayed / (time.perf_counter() - start)

    runs = ", ".join(f"{rate:.1f}" for rate in raw_rates)
    print(f"raw 1 KiB uploads/s:   {raw_rate:8.1f}  ({args.count} objects, {args.threads} threads; runs {runs})")
    print(f"spool writes/s:        {spool_rate:8.1f}")
    print(f"drain replays/s:       {drain_rate:8.1f}  ({report.replayed} items, {report.state})")
    print(f"spool write ratio: {spool_rate / raw_rate:.2f}")
    spool.close()
    raw.close()


if __name__ == "__main__":
    main()
