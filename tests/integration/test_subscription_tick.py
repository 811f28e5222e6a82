"""The execute role's subscription tick (control/scheduled.py) on real PostgreSQL and the Pub/Sub
emulator: a scheduled subscription's due slot polls its source and starts one execution per message,
each slot runs once however many ticks see it, and pause / resume / drain decide whether it runs.
Time is the tick's argument (no sleeps decide anything)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from google.cloud import pubsub_v1
from sqlalchemy import func, select

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.db.schema import execution, subscription_schedule_run
from noetl_cloud.local.process import wait_until
from tests.integration.control_fixtures import playbook, pull_source


@pytest.fixture
def source(local_env: dict[str, str]) -> Iterator[tuple[pubsub_v1.PublisherClient, str, str]]:
    yield from pull_source("sched")


def scheduled(name: str, subscription: str, cadence: str = "* * * * * *") -> str:
    doc = {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": name, "path": f"subs/{name}"},
        "spec": {
            "source": "pubsub",
            "mode": "pull",
            "activation": "scheduled",
            "cadence": cadence,
            "subscription": subscription,
            "runtime": {"batch": 50, "timeout_ms": 2000},
            "dispatch": {"playbook": "domain/drained"},
        },
    }
    return yaml.safe_dump(doc)


def activated(plane: ControlPlane, name: str, subscription: str, cadence: str = "* * * * * *") -> int:
    plane.catalog.register(playbook("domain/drained"))
    plane.catalog.register(scheduled(name, subscription, cadence))
    view, _ = plane.subscriptions.register(f"subs/{name}")
    plane.subscriptions.transition(int(view["subscription_id"]), "activate")
    return int(view["subscription_id"])


def executions_of(plane: ControlPlane, subscription_id: int) -> list[dict[str, Any]]:
    with plane.engine.connect() as conn:
        rows = conn.execute(select(execution.c.workload).where(execution.c.parent_execution_id == subscription_id))
        return [r.workload for r in rows]


def runs_of(plane: ControlPlane, subscription_id: int) -> int:
    with plane.engine.connect() as conn:
        query = select(func.count()).where(subscription_schedule_run.c.subscription_id == subscription_id)
        return int(conn.execute(query).scalar_one())


class Ticks:
    """The tick at a clock of the test's: each call one second later (one new slot of ``* * * * * *``)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.now = datetime.now(UTC) + timedelta(seconds=2)

    def __call__(self) -> dict[str, Any]:
        self.now += timedelta(seconds=1)
        return self.plane.scheduled.tick(self.now)


def test_due_slots_poll_the_source_and_start_one_execution_per_message(plane: ControlPlane, source: Any) -> None:
    publisher, topic, name = source
    sub_id = activated(plane, "drain", name)
    for n in range(5):
        publisher.publish(topic, json.dumps({"n": n}).encode()).result(timeout=30)
    tick = Ticks(plane)
    outcomes: list[dict[str, Any]] = []

    def drained() -> bool:
        outcomes.append(tick())
        return len(executions_of(plane, sub_id)) >= 5

    assert wait_until(drained, timeout=60, interval=0)
    workloads = executions_of(plane, sub_id)
    assert sorted(w["payload"]["n"] for w in workloads) == [0, 1, 2, 3, 4]  # each message once
    runs = [r for o in outcomes for r in o["runs"]]
    assert all(r["status"] == "ok" and r["path"] == "subs/drain" for r in runs)
    assert sum(r["started"] for r in runs) == 5 and sum(r["failed"] for r in runs) == 0
    # Acked once started: the next slot finds nothing.
    assert tick()["runs"][0]["polled"] == 0
    report = plane.scheduled.report(tick.now)
    [job] = report["jobs"]
    assert job["state"] == "active" and job["cadence"] == "* * * * * *"
    assert job["next_due"] == (tick.now.replace(microsecond=0) + timedelta(seconds=1)).isoformat()
    assert job["last_run"]["due_at"] == tick.now.replace(microsecond=0).isoformat()


def test_a_slot_runs_once_however_many_ticks_see_it_due(plane: ControlPlane, source: Any) -> None:
    _, _, name = source
    sub_id = activated(plane, "once", name, cadence="*/10 * * * * *")
    start = datetime.now(UTC).replace(microsecond=0)
    now = start - timedelta(seconds=start.second % 10) + timedelta(seconds=31)  # one second into a slot
    results: list[dict[str, Any]] = []

    def tick() -> None:
        results.append(plane.scheduled.tick(now))

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(r["claimed"] for r in results) == [0, 0, 0, 1]
    assert all(r["due"] == 1 for r in results)
    # A later tick within the same ten-second slot: still the same slot, not run again.
    assert plane.scheduled.tick(now + timedelta(seconds=5))["claimed"] == 0
    assert runs_of(plane, sub_id) == 1
    assert plane.scheduled.tick(now + timedelta(seconds=10))["claimed"] == 1  # the next slot
    assert runs_of(plane, sub_id) == 2


def test_pause_stops_the_runs_resume_starts_them_again_drain_ends_them(plane: ControlPlane, source: Any) -> None:
    publisher, topic, name = source
    sub_id = activated(plane, "paused", name)
    tick = Ticks(plane)
    assert tick()["claimed"] == 1

    plane.subscriptions.transition(sub_id, "pause")
    publisher.publish(topic, b'{"n": 1}').result(timeout=30)
    before = runs_of(plane, sub_id)
    paused = [tick() for _ in range(3)]
    assert all(p["due"] == 0 and p["claimed"] == 0 for p in paused)
    assert runs_of(plane, sub_id) == before
    assert executions_of(plane, sub_id) == []
    assert plane.scheduled.report(tick.now)["jobs"][0]["state"] == "paused"

    plane.subscriptions.transition(sub_id, "resume")
    tick.now = datetime.now(UTC) + timedelta(seconds=2)
    assert wait_until(lambda: (tick(), len(executions_of(plane, sub_id)) == 1)[1], timeout=60, interval=0)

    plane.subscriptions.transition(sub_id, "drain")
    after = runs_of(plane, sub_id)
    assert all(tick()["due"] == 0 for _ in range(3))
    assert runs_of(plane, sub_id) == after
    skipped = plane.scheduled.report(tick.now)["skipped"]
    assert skipped == [{"path": "subs/paused", "reason": "subscription is draining"}]


def test_the_tick_and_the_schedule_are_routes_of_the_execute_role(client: FlaskClient, plane: ControlPlane) -> None:
    activated(plane, "routed", "projects/noetl-local/subscriptions/none", cadence="0 3 * * *")
    answer = client.post("/api/internal/subscriptions/tick", json={})
    assert answer.status_code == 200 and answer.json is not None
    assert answer.json["claimed"] == 0  # activated after 03:00 today: its slot is tomorrow's
    schedule = client.get("/api/internal/subscriptions/schedule")
    assert schedule.status_code == 200 and schedule.json is not None
    [job] = schedule.json["jobs"]
    assert (job["path"], job["cadence"], job["next_due"][11:19]) == ("subs/routed", "0 3 * * *", "03:00:00")
    assert client.post("/api/internal/subscriptions/tick", headers={"Authorization": "Bearer nope"}).status_code == 401


class BlockingSource:
    """A source whose fetch holds until released, counting the fetches in flight at once."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.calls = 0

    def fetch(self, max_messages: int, timeout_s: float) -> list[Any]:
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
        self.entered.set()
        self.release.wait(30)
        with self.lock:
            self.active -= 1
        return []


def test_a_slot_due_while_the_last_one_still_polls_waits_for_it(plane: ControlPlane) -> None:
    from noetl_cloud.control.scheduled import ScheduledSubscriptions
    from noetl_cloud.tools.subscription import SubscriptionTool

    sub_id = activated(plane, "slow", "projects/noetl-local/subscriptions/slow")
    source = BlockingSource()
    tick = ScheduledSubscriptions(
        plane.engine,
        plane.catalog,
        plane.subscriptions,
        plane.executions,
        tenant=(plane.settings.tenant_id, plane.settings.organization_id),
        tool=SubscriptionTool(lambda config: source),
    )
    now = datetime.now(UTC) + timedelta(seconds=2)
    first = threading.Thread(target=tick.tick, args=(now,))
    first.start()
    assert source.entered.wait(30)
    second = threading.Thread(target=tick.tick, args=(now + timedelta(seconds=1),))
    second.start()
    assert wait_until(lambda: runs_of(plane, sub_id) == 2, timeout=30)  # the next slot is claimed ...
    source.release.set()
    first.join(30)
    second.join(30)
    assert source.calls == 2 and source.most == 1  # ... and polled only once the first poll ended
