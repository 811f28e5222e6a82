"""Scheduled subscriptions as jobs (runtime/schedule.py) from the real catalog and lifecycle on
PostgreSQL: registered in the catalog, registered and moved through the state machine by the
control plane's services, listed as the scheduler would read them."""

from __future__ import annotations

import yaml

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.runtime.schedule import scheduled_jobs
from tests.integration.control_fixtures import playbook


def subscription(name: str, **spec: object) -> str:
    body = {
        "source": "pubsub",
        "mode": "pull",
        "activation": "scheduled",
        "cadence": "*/2 * * * *",
        "subscription": f"projects/noetl-local/subscriptions/{name}",
        "dispatch": {"playbook": "domain/drained"},
        **spec,
    }
    doc = {"apiVersion": "noetl.io/v1", "kind": "Subscription", "metadata": {"name": name, "path": f"subs/{name}"}}
    return yaml.safe_dump({**doc, "spec": body})


def test_scheduled_subscriptions_follow_their_lifecycle_into_the_job_list(plane: ControlPlane) -> None:
    plane.catalog.register(playbook("domain/drained"))
    for name, extra in (("drain-a", {}), ("drain-b", {"cadence": "0 * * * *"}), ("live", {"activation": "continuous"})):
        plane.catalog.register(subscription(name, **extra))
    assert scheduled_jobs(plane.catalog, plane.subscriptions).jobs == []  # none registered yet

    views = {name: plane.subscriptions.register(f"subs/{name}")[0] for name in ("drain-a", "drain-b", "live")}
    ids = {name: int(view["subscription_id"]) for name, view in views.items()}
    for name in ids:
        plane.subscriptions.transition(ids[name], "activate")
    schedule = scheduled_jobs(plane.catalog, plane.subscriptions)
    assert {(j.path, j.cadence, j.paused) for j in schedule.jobs} == {
        ("subs/drain-a", "*/2 * * * *", False),
        ("subs/drain-b", "0 * * * *", False),
    }
    assert {j.subscription_id for j in schedule.jobs} == {str(ids["drain-a"]), str(ids["drain-b"])}

    plane.subscriptions.transition(ids["drain-a"], "pause")
    plane.subscriptions.transition(ids["drain-b"], "drain")
    schedule = scheduled_jobs(plane.catalog, plane.subscriptions)
    assert [(j.path, j.paused) for j in schedule.jobs] == [("subs/drain-a", True)]
    assert {"path": "subs/drain-b", "reason": "subscription is draining"} in schedule.skipped

    plane.subscriptions.transition(ids["drain-a"], "resume")
    assert [j.paused for j in scheduled_jobs(plane.catalog, plane.subscriptions).jobs] == [False]
