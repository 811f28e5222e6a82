"""Scheduled subscriptions on the local stack (issue #23 item 4): a subscription registered at run time
with ``activation: scheduled`` and a two-second cadence is polled by the stack's own scheduler (its
``subscription-tick`` job calls the execute role) with no command of ours; paused, it is not run;
resumed, it runs again; ``local status`` shows it with its next run. Waits are on observed state (the
scheduler's tick count, the executions), never on a sleep."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import pubsub_v1

from noetl_cloud.local.process import wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.web.client import ApiClient
from tests.e2e.stack_api import ROOT
from tests.integration.control_fixtures import playbook, pull_source

CADENCE = "*/2 * * * * *"  # every two seconds (a leading seconds field)


@pytest.fixture
def source(stack_env: dict[str, str]) -> Iterator[tuple[pubsub_v1.PublisherClient, str, str]]:
    yield from pull_source("e2e-sched")


def subscription_doc(path: str, subscription: str) -> str:
    return json.dumps(
        {
            "apiVersion": "noetl.io/v1",
            "kind": "Subscription",
            "metadata": {"name": path.rsplit("/", 1)[-1], "path": path},
            "spec": {
                "source": "pubsub",
                "mode": "pull",
                "activation": "scheduled",
                "cadence": CADENCE,
                "subscription": subscription,
                "runtime": {"batch": 100, "timeout_ms": 1500},
                "dispatch": {"playbook": "e2e/scheduled_noop"},
            },
        }
    )


def stack() -> LocalStack:
    state = os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))
    return LocalStack.from_env({**os.environ, "NOETL_LOCAL_STATE_DIR": state})


def scheduler_report() -> dict[str, Any]:
    [row] = [r for r in stack().status() if r.name == "scheduler"]
    assert row.running, "the stack's scheduler is not running"
    return {"jobs": {j["job"]: j for j in row.jobs or []}, "subscriptions": row.subscriptions or {}}


def ticks() -> int:
    return int(scheduler_report()["jobs"]["subscription-tick"]["runs"])


def executions(api: ApiClient, subscription_id: str) -> list[dict[str, Any]]:
    answer = api.get(f"/api/executions?parent={subscription_id}&limit=100")
    answer.raise_for_error()
    items: list[dict[str, Any]] = answer.json["items"]
    return items


def test_the_stacks_scheduler_polls_a_scheduled_subscription_pause_stops_it_resume_restarts_it(
    stack_api: ApiClient, source: Any
) -> None:
    publisher, topic, name = source
    path = f"e2e/scheduled-{secrets.token_hex(3)}"
    stack_api.post("/api/catalog", json={"content": playbook("e2e/scheduled_noop")}).raise_for_error()
    stack_api.post("/api/catalog", json={"content": subscription_doc(path, name)}).raise_for_error()
    registered = stack_api.post("/api/subscriptions/register", json={"path": path})
    registered.raise_for_error()
    sub_id = registered.json["subscription_id"]
    try:
        _scheduled_flow(stack_api, publisher, topic, path, sub_id)
    finally:  # no subscription left active over a deleted source for later ticks
        stack_api.post(f"/api/subscriptions/{sub_id}/deactivate")


def _scheduled_flow(stack_api: ApiClient, publisher: Any, topic: str, path: str, sub_id: str) -> None:
    stack_api.post(f"/api/subscriptions/{sub_id}/activate").raise_for_error()

    def publish(first: int, count: int) -> None:
        for n in range(first, first + count):
            publisher.publish(topic, json.dumps({"n": n}).encode()).result(timeout=30)

    # Active: the scheduler's ticks run its slots; every message becomes one execution.
    publish(0, 3)
    assert wait_until(lambda: len(executions(stack_api, sub_id)) >= 3, timeout=60, interval=0.5)
    report = scheduler_report()["subscriptions"]
    [job] = [j for j in report["jobs"] if j["path"] == path]
    assert (job["state"], job["cadence"]) == ("active", CADENCE) and job["next_due"]
    assert job["runs"] >= 1 and job["last_run"]["status"] in ("ok", "running")  # its next poll may be on

    # `local status` prints it, with its next run.
    from noetl_cloud.cli.local import status_lines

    lines = status_lines(stack(), stack().status())
    assert any(line.startswith(path) and CADENCE in line and "active" in line for line in lines), lines

    # Paused: ticks go on, its slots do not run, what is published stays in the source.
    stack_api.post(f"/api/subscriptions/{sub_id}/pause").raise_for_error()
    seen = ticks()
    assert wait_until(lambda: ticks() >= seen + 2, timeout=60, interval=0.5)  # a tick in flight at the pause ends
    runs_paused = _runs(path)
    publish(3, 2)
    seen = ticks()
    assert wait_until(lambda: ticks() >= seen + 4, timeout=60, interval=0.5)  # four ticks, ≥ 2 slots of its cadence
    assert _runs(path) == runs_paused
    assert len(executions(stack_api, sub_id)) == 3
    [job] = [j for j in scheduler_report()["subscriptions"]["jobs"] if j["path"] == path]
    assert job["state"] == "paused" and job["next_due"] is None

    # Resumed: runs again and takes the backlog.
    stack_api.post(f"/api/subscriptions/{sub_id}/resume").raise_for_error()
    assert wait_until(lambda: len(executions(stack_api, sub_id)) >= 5, timeout=60, interval=0.5)
    assert _runs(path) > runs_paused
    seen = ticks()
    assert wait_until(lambda: ticks() >= seen + 2, timeout=60, interval=0.5)
    assert len(executions(stack_api, sub_id)) == 5  # each message once

    # Drained: no job any more.
    stack_api.post(f"/api/subscriptions/{sub_id}/drain").raise_for_error()
    skipped = scheduler_report()["subscriptions"]["skipped"]
    assert {"path": path, "reason": "subscription is draining"} in skipped


def _runs(path: str) -> int:
    [job] = [j for j in scheduler_report()["subscriptions"]["jobs"] if j["path"] == path]
    return int(job["runs"])
