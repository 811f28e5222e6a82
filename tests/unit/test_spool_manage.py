"""The drainer's ``/api/spool/*`` on the memory adapters: overview, dead letters, resend one and all, drain."""

from __future__ import annotations

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.spool.memory import InMemorySpool
from tests.spool_manage_scenario import exercise, rig


def test_the_spool_api_lists_lanes_and_dead_letters_and_resends_them_in_receive_order() -> None:
    exercise(rig(InMemorySpool(), InMemoryKeyValueStore(), "subscriptions/devices"))


def test_a_resend_that_fails_is_counted_and_named_in_the_operation_and_the_rest_go_on() -> None:
    from noetl_cloud.spool.engine import payload_bytes
    from tests.contracts.spool import make_item
    from tests.spool_manage_scenario import AUTH, dead_letter

    r = rig(InMemorySpool(), InMemoryKeyValueStore(), "subscriptions/devices")
    sub = r.target.subscription
    good = dead_letter(r, 1, "a", "poison")
    # another message already lives under the name the second dead letter would go back to
    clash = make_item(sub, 99, payload_bytes({"n": 99}), lane="k-a", message_id="m99")
    r.backend.put(clash, payload_bytes({"n": 99}))
    other = clash.model_copy(update={"sha256": make_item(sub, 99, b"x").sha256, "payload_bytes": 1})
    blocked = r.backend.put_dead(other, b"x", "poison").name
    started = r.client.post("/api/spool/resends", json={"subscription": sub}, headers=AUTH)
    assert started.status_code == 202 and started.get_json()["state"] == "running"
    record = r.client.get(f"/api/spool/resends/{started.get_json()['operation_id']}", headers=AUTH).get_json()
    assert (record["state"], record["matched"], record["resent"], record["failed"]) == ("done", 2, 1, 1)
    assert record["errors"] == [{"name": blocked, "code": "spool_item_exists"}]
    assert [ref.name for ref in r.backend.list(sub, dlq=True)] == [blocked]
    assert good.startswith(f"{sub.replace('/', '%2F')}/dlq/k-a/")
    # the drain that ends the operation replayed the resent one, then the live item of its lane
    assert [request["workload"]["n"] for request in r.control.executions] == [1, 99]
