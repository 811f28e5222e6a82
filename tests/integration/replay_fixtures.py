"""Fixtures of the replay, projector and event-outbox tests: a control plane whose events topic is its
own on the Pub/Sub emulator (with a pull subscription), a projector on the same database, and drivers."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1
from pydantic import SecretStr
from sqlalchemy import text

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.projector.app import build_app as build_projector_app
from noetl_cloud.projector.app import push_auth_from_settings
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import PROJECT, TOKEN, Topics, events_topic_for, make_settings

PUSH_TOKEN = "projector-push-token"


@dataclass
class EventsTopic:
    name: str
    subscription: str
    subscriber: pubsub_v1.SubscriberClient

    def pull(self, expected: int, timeout_s: float = 30.0) -> list[Any]:
        """Pull until ``expected`` messages arrived (acking them) or the time is up."""
        import time

        received: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(received) < expected and time.monotonic() < deadline:
            wait = max(1.0, min(10.0, deadline - time.monotonic()))
            response = self.subscriber.pull(subscription=self.subscription, max_messages=1000, timeout=wait)
            if response.received_messages:
                received += [m.message for m in response.received_messages]
                self.subscriber.acknowledge(
                    subscription=self.subscription, ack_ids=[m.ack_id for m in response.received_messages]
                )
        return received


@pytest.fixture
def events_topic_name(topic_prefix: str) -> str:
    return events_topic_for(topic_prefix)


@pytest.fixture
def replay_settings(
    database_url: str, local_env: dict[str, str], topic_prefix: str, events_topic_name: str
) -> Settings:
    return make_settings(
        database_url,
        local_env,
        topic_prefix,
        events_topic=events_topic_name,
        tenant_id="acme",
        organization_id="ops",
        projector_push_token=SecretStr(PUSH_TOKEN),
        replay_snapshot_every=25,
        replay_snapshot_keep=3,
        replay_snapshot_anchor_every=100,
    )


@pytest.fixture
def events_topic(replay_settings: Settings, topics: Topics) -> Iterator[EventsTopic]:
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(PROJECT, replay_settings.events_topic)  # made by the topics fixture
    subscription = topics.subscriber.subscription_path(PROJECT, replay_settings.events_topic)
    topics.subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "ack_deadline_seconds": 60, "enable_message_ordering": True}
    )
    yield EventsTopic(replay_settings.events_topic, subscription, topics.subscriber)
    for delete in (
        lambda: topics.subscriber.delete_subscription(subscription=subscription),
        lambda: publisher.delete_topic(topic=topic),
    ):
        try:
            delete()
        except NotFound:
            pass


@pytest.fixture
def rplane(replay_settings: Settings, events_topic: EventsTopic) -> Iterator[ControlPlane]:
    plane = ControlPlane(replay_settings)
    yield plane
    plane.engine.dispose()


@pytest.fixture
def rclient(rplane: ControlPlane) -> FlaskClient:
    client = build_app(rplane, InternalAuth(token=TOKEN)).test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return client


@pytest.fixture
def projector_role(replay_settings: Settings) -> Iterator[ProjectorRole]:
    role = ProjectorRole(replay_settings.model_copy(update={"role": "projector"}))
    yield role
    role.engine.dispose()
    role.reader.dispose()


@pytest.fixture
def projector_client(projector_role: ProjectorRole) -> FlaskClient:
    app = build_projector_app(
        projector_role, push_auth_from_settings(projector_role.settings), InternalAuth(token=TOKEN)
    )
    return app.test_client()  # push requests carry the push token; API calls pass API_HEADERS


API_HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def last_event(plane: ControlPlane, eid: str) -> int:
    """The id of the execution's last event (what a delivery of its latest write names)."""
    with plane.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT event_id FROM event WHERE execution_id = :e ORDER BY position DESC LIMIT 1"),
                {"e": int(eid)},
            ).scalar_one()
        )


def push_body(data: dict[str, Any], attributes: dict[str, str] | None = None) -> dict[str, Any]:
    """A wrapped Pub/Sub push envelope, as the push subscription posts it."""
    return {
        "message": {
            "data": base64.b64encode(json.dumps(data).encode()).decode(),
            "attributes": attributes or {},
            "messageId": secrets.token_hex(6),
        },
        "subscription": "projects/noetl-local/subscriptions/events-projector",
    }


CHAIN_STEP = """\
  - step: s{n}
    tool: {{kind: noop, result: {n}}}
{next}"""


def chain_playbook(path: str, steps: int) -> str:
    """A playbook of ``steps`` noop steps, each routing to the next."""
    body = []
    for n in range(1, steps + 1):
        nxt = f"    next: [{{step: s{n + 1}}}]\n" if n < steps else ""
        body.append(CHAIN_STEP.format(n=n, next=nxt))
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        f"metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n"
        "workflow:\n" + "".join(body)
    )
