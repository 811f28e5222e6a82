"""Replay parity on the local stack: execute and workers through the Pub/Sub emulator, the writers'
events pushed by the emulator (ordering key = execution id) to a projector process; after the golden
executions of the distributed suite, ``noetl-cloud replay verify`` finds every surface equal to a fresh
fold, and names the surface an edited projection row drifts on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import pubsub_v1
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from tests.e2e.roles import free_port, start, stop_all
from tests.e2e.test_distributed import BLOCKING, GOLDENS, Cluster, _fill, cluster
from tests.integration.control_fixtures import PROJECT, TOKEN, Topics, events_topic_for
from tests.integration.distributed_driver import PLAYBOOKS, golden_content

PUSH_TOKEN = "e2e-projector-token"


@pytest.fixture
def replay_stack(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics
) -> Iterator[tuple[Cluster, str]]:
    events = events_topic_for(topic_prefix)  # created (and deleted) by the topics fixture
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(PROJECT, events)
    env = {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_PROJECT_ID": PROJECT,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_EVENTS_TOPIC": events,
        "NOETL_PROJECTOR_PUSH_TOKEN": PUSH_TOKEN,
    }
    port = free_port()
    projector = start("projector", env, port, workers=2, threads=8)
    subscription = topics.subscriber.subscription_path(PROJECT, f"{events}-projector")
    topics.subscriber.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "push_config": {"push_endpoint": f"http://127.0.0.1:{port}/?token={PUSH_TOKEN}"},
            "ack_deadline_seconds": 30,
            "enable_message_ordering": True,
        }
    )
    try:
        with cluster(
            database_url, local_env, topic_prefix, NOETL_EVENTS_TOPIC=events, NOETL_PROJECTOR_PUSH_TOKEN=PUSH_TOKEN
        ) as c:
            yield c, database_url
    finally:
        topics.subscriber.delete_subscription(subscription=subscription)
        stop_all([projector])


def _verify(stack: Cluster, eid: str, wait: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETL_API_URL": f"http://127.0.0.1:{stack.api_port}", "NOETL_INTERNAL_API_TOKEN": TOKEN}
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("noetl-cloud")),
            "replay",
            "verify",
            "--execution-id",
            eid,
            "--wait",
            str(wait),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_live_projections_of_the_distributed_goldens_equal_their_replay(
    replay_stack: tuple[Cluster, str], api: str
) -> None:
    stack, database_url = replay_stack
    stack.register(golden_content("children/double", "children/double"))
    stack.register(golden_content("children/rooms", "children/rooms"))
    started: dict[str, str] = {}
    for name in [n for n in GOLDENS if n not in BLOCKING]:
        expected: dict[str, Any] = yaml.safe_load((PLAYBOOKS / f"{name}.expected.yaml").read_text())
        stack.register(golden_content(name, f"golden/{name}"))
        started[name] = stack.execute(f"golden/{name}", _fill(expected.get("workload") or {}, api))
    for name in BLOCKING:  # each child-starting golden on its own, as in the distributed suite
        stack.register(golden_content(name, f"golden/{name}"))
        started[name] = stack.execute(f"golden/{name}")
        stack.wait(started[name])
    children = _sql(database_url, "SELECT execution_id FROM execution WHERE parent_execution_id IS NOT NULL")
    executions = {**started, **{f"child {row[0]}": str(row[0]) for row in children}}
    for eid in started.values():
        stack.wait(eid)
    for name, eid in executions.items():
        verified = _verify(stack, eid)
        assert verified.returncode == 0, (name, verified.stdout, verified.stderr)

    eid = started["loop_parallel"]
    _sql(
        database_url,
        "UPDATE projection SET checksum = 'edited' WHERE execution_id = :e AND projection_type = 'loops'",
        e=int(eid),
    )
    drifted = _verify(stack, eid, wait=0)
    assert drifted.returncode == 1 and "drift in execution" in drifted.stderr and "loops" in drifted.stderr


def _sql(database_url: str, statement: str, **params: Any) -> list[Any]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        engine.dispose()
