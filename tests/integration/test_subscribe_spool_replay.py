"""``noetl-cloud subscribe --local`` replays what an earlier run spooled (issue 23, item 7).

An earlier run of the command left what an outage of its runner leaves: the circuit open in the
command's state file (``<spool folder>.state.json``), the backlog mark, and five messages in its
local_disk spool over two ordering keys. The command is started again (against the Pub/Sub emulator,
with two live messages waiting): its circuit is still open, so its drain loop probes with the oldest
item, the probe closes the circuit, and the spool is replayed in receive order per key; the live
messages queue behind the backlog and run after it. Nothing is replayed twice, the spool is empty.
"""

from __future__ import annotations

import collections
import itertools
import json
import secrets
from datetime import timedelta
from pathlib import Path

from google.cloud import pubsub_v1

from noetl_cloud.cli import main
from noetl_cloud.envelope import utc_now
from noetl_cloud.kv.file import FileKeyValueStore
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.circuit import CircuitState
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.local_disk import LocalDiskSpool
from noetl_cloud.spool.target import SpoolTarget
from tests.integration.control_fixtures import PROJECT
from tests.playbooks import INGEST

PLAYBOOK = INGEST
PATH = "subscriptions/local-spool"
SPOOL = {
    "mode": "buffer_and_ack",
    "backend": "local_disk",
    "ordering": "per_key",
    "ordering_key": "device",
    "circuit": {"trip_after": 2, "probe_after_ms": 500},
}


def leave_an_outage_behind(folder: Path) -> None:
    """What a run of the command whose runner failed leaves in its folder: open circuit, five items."""
    kv = FileKeyValueStore(folder.with_name(folder.name + ".state.json"))
    ids = itertools.count(1)
    engine = SpoolEngine(
        kv, EventJournal(MemoryEventSink(), kv), FixedBackend(LocalDiskSpool(folder)), ids=lambda: next(ids)
    )
    target = SpoolTarget.from_spec(PATH, SPOOL, source_kind="pull", downstream="local:in-process")
    opened = utc_now() - timedelta(seconds=5)
    kv.create(engine.breaker(target).key, CircuitState("open", 2, opened, opened).to_value())
    for n in range(5):
        plan = {"playbook": "domain/ingest", "request": {"path": "domain/ingest", "meta": {"message_id": f"old-{n}"}}}
        engine.spool(
            target,
            payload_bytes({"payload": {"n": n, "device": "ab"[n % 2]}}),  # what the runtime spools
            message_id=f"old-{n}",
            source="pubsub",
            plan=plan,
            reason="circuit_open",
            ordering_key="ab"[n % 2],
        )
    assert engine.backlog(PATH) and len(LocalDiskSpool(folder).list(PATH)) == 5


def test_a_restarted_subscribe_replays_its_spool_in_order_then_runs_live_messages(
    tmp_path: Path, local_env: dict[str, str]
) -> None:
    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "ingest.yaml").write_text(PLAYBOOK)
    folder = tmp_path / "spool"
    leave_an_outage_behind(folder)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    name = f"local-spool-{secrets.token_hex(4)}"
    topic, pull = publisher.topic_path(PROJECT, name), subscriber.subscription_path(PROJECT, name)
    publisher.create_topic(name=topic)
    # A minute to ack: on a loaded machine a 10 s deadline can lapse in the bounded run and redeliver.
    subscriber.create_subscription(name=pull, topic=topic, ack_deadline_seconds=60)
    try:
        for n in (5, 6):
            publisher.publish(topic, json.dumps({"n": n, "device": "ab"[n % 2]}).encode(), device="ab"[n % 2]).result(
                timeout=30
            )
        (tmp_path / "sub.yaml").write_text(
            "apiVersion: noetl.io/v1\nkind: Subscription\n"
            f"metadata: {{name: local-spool, path: {PATH}}}\n"
            f"spec:\n  source: pubsub\n  mode: pull\n  subscription: {pull}\n"
            "  dispatch: {playbook: domain/ingest}\n"
            f"  spool: {json.dumps(SPOOL)}\n"
        )
        trail = tmp_path / "trail.jsonl"
        args = ["subscribe", str(tmp_path / "sub.yaml"), "--local", "--events", str(trail)]
        # A bounded run: the two live messages are spooled behind the backlog (ordered_then_live), so
        # the command runs for its duration, replaying as it goes.
        assert main([*args, "--spool-dir", str(folder), "--duration", "12"]) == 0
    finally:
        subscriber.delete_subscription(subscription=pull)
        publisher.delete_topic(topic=topic)
        subscriber.close()
    events = [json.loads(line) for line in trail.read_text().splitlines()]
    types = collections.Counter(e["event_type"] for e in events)
    assert types["subscription.circuit.closed"] == 1
    replayed = [e["payload"]["message_id"] for e in events if e["event_type"] == "subscription.message.replayed"]
    old = [m for m in replayed if m.startswith("old-")]
    assert sorted(old) == [f"old-{n}" for n in range(5)] and len(set(old)) == 5
    for lane in ("old-0 old-2 old-4", "old-1 old-3"):  # each device's items replayed in receive order
        assert [m for m in old if m in lane.split()] == lane.split()
    assert types["playbook.completed"] == 7, types  # five replayed, two live, each once
    assert types["playbook.started"] == 7, types
    # Each spooled item is recorded once (the drainer writes its event again before the replay, and
    # the events file keeps one per idempotency key), and no message started twice from the spool.
    spooled = [e["payload"]["spool_ref"] for e in events if e["event_type"] == "subscription.message.spooled"]
    assert len(spooled) == len(set(spooled)), types
    started = [
        e["payload"]["message_id"]
        for e in events
        if e["event_type"] == "subscription.message.replayed" and not e["payload"]["duplicate"]
    ]
    assert len(started) == len(set(started)), started
    assert LocalDiskSpool(folder).list(PATH) == []
    state = json.loads(folder.with_name("spool.state.json").read_text())
    circuit = next(v for k, v in state.items() if k.startswith("circuit/"))
    assert json.loads(circuit["value"])["state"] == "closed"
