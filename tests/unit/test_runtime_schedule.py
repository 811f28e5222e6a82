"""Scheduled subscriptions as jobs (runtime/schedule.py): which subscriptions give a job, in which
state, with which poll task; against an in-memory catalog and registry."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from noetl_cloud.runtime.schedule import cadence_problem, job_name, latest_due, next_due, scheduled_jobs


@dataclass
class Entry:
    path: str
    document: dict[str, Any]


class Catalog:
    def __init__(self, *docs: dict[str, Any]) -> None:
        self.entries = [Entry(d["metadata"]["path"], d) for d in docs]

    def list(self, kind: str | None = None) -> list[Entry]:
        return [e for e in self.entries if kind is None or e.document.get("kind") == kind]


class Registrations(dict[str, dict[str, Any]]):
    def live_for_path(self, path: str) -> dict[str, Any] | None:
        view = self.get(path)
        return view if view is not None and view["state"] != "deactivated" else None


def subscription(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "source": "nats",
        "mode": "pull",
        "activation": "scheduled",
        "cadence": "*/5 * * * *",
        "stream": "ORDERS",
        "dispatch": {"playbook": "domain/process_order"},
        "runtime": {"batch": 50, "timeout_ms": 3000},
        **spec,
    }
    return {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": name, "path": f"subscriptions/{name}"},
        "spec": body,
    }


def test_an_active_scheduled_subscription_is_a_job_that_polls_it_on_its_cadence() -> None:
    catalog = Catalog(subscription("orders", consumer="orders-drain"))
    schedule = scheduled_jobs(
        catalog, Registrations({"subscriptions/orders": {"subscription_id": "7", "state": "active"}})
    )
    assert schedule.skipped == []
    [job] = schedule.jobs
    assert (job.name, job.cadence, job.paused, job.subscription_id) == (
        "subscription-subscriptions-orders",
        "*/5 * * * *",
        False,
        "7",
    )
    assert job.playbook == "domain/process_order"
    assert job.task["kind"] == "subscription" and job.task["operation"] == "poll"
    assert (job.task["source"], job.task["stream"], job.task["consumer"]) == ("nats", "ORDERS", "orders-drain")
    assert (job.task["batch"], job.task["timeout_ms"], job.task["ack"]) == (50, 3000, "on_success")


@pytest.mark.parametrize(
    ("state", "paused"),
    [("active", False), ("paused", True), ("registered", None), ("draining", None), ("deactivated", None)],
)
def test_the_lifecycle_decides_whether_the_job_runs(state: str, paused: bool | None) -> None:
    catalog = Catalog(subscription("orders"))
    schedule = scheduled_jobs(
        catalog, Registrations({"subscriptions/orders": {"subscription_id": "7", "state": state}})
    )
    assert [job.paused for job in schedule.jobs] == ([] if paused is None else [paused])
    if paused is None:
        assert schedule.skipped[0]["path"] == "subscriptions/orders"


def test_continuous_push_unregistered_and_uncronlike_subscriptions_give_no_job() -> None:
    catalog = Catalog(
        subscription("live", activation="continuous"),
        subscription("never"),
        subscription("hourly", cadence="every hour"),
        subscription("clicks", source="kafka", topic="edge.clicks", stream=None),
    )
    active = {"subscription_id": "1", "state": "active"}
    registrations = Registrations({f"subscriptions/{n}": active for n in ("live", "hourly", "clicks")})
    schedule = scheduled_jobs(catalog, registrations)
    assert [job.path for job in schedule.jobs] == ["subscriptions/clicks"]
    assert schedule.jobs[0].task["group"] == "clicks"  # a Kafka drain's group defaults to the name
    reasons = {s["path"]: s["reason"] for s in schedule.skipped}
    assert reasons["subscriptions/never"] == "subscription is not registered"
    assert reasons["subscriptions/hourly"] == "not a valid Subscription"  # the cadence is refused by the spec
    assert "subscriptions/live" not in reasons


@pytest.mark.parametrize(
    ("cadence", "ok"),
    [
        ("*/1 * * * *", True),
        ("0 9 * * MON-FRI", True),
        ("*/5 * * * * *", True),  # six fields: a leading seconds field
        (None, False),
        ("* * * *", False),
        ("0 9 * * ; rm", False),
        ("61 * * * *", False),  # shaped like cron, but no minute 61
        ("* * 31 2 *", False),  # never due
    ],
)
def test_cadence_is_unix_cron_with_an_optional_seconds_field(cadence: str | None, ok: bool) -> None:
    assert (cadence_problem(cadence) is None) is ok


def test_the_latest_and_next_slots_of_a_cadence() -> None:
    at = datetime(2026, 11, 27, 10, 7, 30, 250_000, tzinfo=UTC)
    assert latest_due("*/5 * * * *", at) == datetime(2026, 11, 27, 10, 5, tzinfo=UTC)
    assert next_due("*/5 * * * *", at) == datetime(2026, 11, 27, 10, 10, tzinfo=UTC)
    assert latest_due("*/10 * * * * *", at) == datetime(2026, 11, 27, 10, 7, 30, tzinfo=UTC)
    on_slot = datetime(2026, 11, 27, 10, 10, tzinfo=UTC)
    assert latest_due("*/5 * * * *", on_slot) == on_slot  # a slot is due at its own instant
    assert next_due("*/5 * * * *", on_slot) == datetime(2026, 11, 27, 10, 15, tzinfo=UTC)


def test_a_job_carries_since_when_its_registration_entered_its_state() -> None:
    registration = {"subscription_id": "7", "state": "active", "updated_at": "2026-11-27T10:00:00+00:00"}
    [job] = scheduled_jobs(Catalog(subscription("orders")), Registrations({"subscriptions/orders": registration})).jobs
    assert job.since == "2026-11-27T10:00:00+00:00"
    assert job.spec["dispatch"]["playbook"] == "domain/process_order"
    assert "spec" not in job.to_dict()


def test_job_names_are_scheduler_ids() -> None:
    assert job_name("subscriptions/Orders_drain.v2") == "subscription-subscriptions-orders-drain-v2"
