"""Soak: 20,000 messages through the runtime become 20,000 executions, and the runtime's peak RSS
stays under 300 MiB. Opt-in (``NOETL_TEST_SOAK=1``): it takes longer than the suite's budget
(docs/runtime.md has the figures)."""

from __future__ import annotations

import os
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


pytestmark = pytest.mark.skipif(not os.environ.get("NOETL_TEST_SOAK"), reason="opt-in: NOETL_TEST_SOAK=1")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_twenty_thousand_messages_become_twenty_thousand_executions_in_bounded_memory(
    soak: Harness,
) -> None:
    plane = soak
    plane.register(dispatch={"batch_dispatch": True, "batch_max": 100}, runtime={"max_in_flight": 1000})
    ids = plane.publish_many(MESSAGES)
    plane.start()
    assert plane.runtime is not None
    pid = plane.runtime.pid
    peak = [0.0]

    def done() -> bool:
        peak[0] = max(peak[0], peak_rss_mib(pid))
        return len(plane.executions()) >= MESSAGES

    assert wait_until(done, timeout=600, interval=1.0)
    assert sorted(plane.message_ids()) == sorted(ids)
    assert max(peak[0], peak_rss_mib(pid)) < RSS_LIMIT_MIB
