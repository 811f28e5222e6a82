"""Soak: 20,000 messages through the runtime become 20,000 executions, and the runtime's peak RSS
stays under 300 MiB. About a minute on a loaded 2-core machine, so it runs with the suite
(docs/runtime.md has the figures)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_cloud.local.process import wait_until
from tests.e2e.test_subscription_runtime import Harness, execute_only
from tests.integration.control_fixtures import Topics

MESSAGES = 20_000
RSS_LIMIT_MIB = 300


@pytest.fixture
def soak(database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics) -> Iterator[Harness]:
    with execute_only(database_url, local_env, topic_prefix) as harness:
        yield harness


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_twenty_thousand_messages_become_twenty_thousand_executions_in_bounded_memory(
    soak: Harness,
) -> None:
    plane = soak
    # Dedup on: the emulator redelivers some held messages under load (1,100 of 20,000 on a loaded
    # 2-core machine, in runs of consecutive ids ~20-30 s after their first delivery, whatever the
    # lease extension); the window collapses each redelivery into its first execution.
    plane.register(
        dispatch={"batch_dispatch": True, "batch_max": 100},
        runtime={"max_in_flight": 1000},
        dedup={"enabled": True, "window_secs": 3600},
    )
    ids = plane.publish_many(MESSAGES)
    plane.start()
    assert plane.runtime is not None
    pid = plane.runtime.pid
    peak = [0.0]

    def count() -> int:
        (row,) = plane.sql("SELECT count(*) AS n FROM execution WHERE meta->>'subscription_path' = :p", p=plane.path)
        return int(row.n)

    def done() -> bool:
        peak[0] = max(peak[0], peak_rss_mib(pid))
        return count() >= MESSAGES

    assert wait_until(done, timeout=600, interval=1.0), count()
    assert sorted(plane.message_ids()) == sorted(ids)  # exactly one execution per message
    redelivered = len(plane.events("subscription.message.deduplicated"))
    peak_mib = max(peak[0], peak_rss_mib(pid))
    print(f"soak: {MESSAGES} executions, {redelivered} redeliveries deduplicated, peak RSS {peak_mib:.1f} MiB")
    assert peak_mib < RSS_LIMIT_MIB
