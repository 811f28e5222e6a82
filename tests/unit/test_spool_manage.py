"""The drainer's ``/api/spool/*`` on the memory adapters: overview, dead letters, resend one and all, drain."""

from __future__ import annotations

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.spool.memory import InMemorySpool
from tests.spool_manage_scenario import exercise, rig


def test_the_spool_api_lists_lanes_and_dead_letters_and_resends_them_in_receive_order() -> None:
    exercise(rig(InMemorySpool(), InMemoryKeyValueStore(), "subscriptions/devices"))
