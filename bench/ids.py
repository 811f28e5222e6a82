"""Snowflake ids per second, next to a baseline measured in the same run.

Baseline: ``uuid.uuid4()`` (what a service would use without snowflakes), in the same loop.
Prints figures and ratios; never fails on timing.

    .venv/bin/python bench/ids.py [--count N]
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable

from noetl_cloud.ids import SnowflakeGenerator


def rate(make: Callable[[], object], count: int, threads: int = 1) -> float:
    per_thread = count // threads

    def work() -> None:
        for _ in range(per_thread):
            make()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return per_thread * threads / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args()
    gen = SnowflakeGenerator(node_id=1)
    baseline = rate(uuid.uuid4, args.count)
    single = rate(gen.next_id, args.count)
    four = rate(gen.next_id, args.count, threads=4)
    print(f"baseline uuid4:            {baseline:>12,.0f} ids/s")
    print(f"snowflake, 1 thread:       {single:>12,.0f} ids/s")
    print(f"snowflake, 4 threads:      {four:>12,.0f} ids/s")
    print(f"ids ratio: {single / baseline:.2f}")
    print(f"ids ratio (4 threads): {four / baseline:.2f}")


if __name__ == "__main__":
    main()
