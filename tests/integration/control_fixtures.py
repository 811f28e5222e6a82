"""Fixtures of the control-plane tests: a ControlPlane on a fresh database, its Flask client, and
Pub/Sub topics and subscriptions of its own on the emulator (a unique topic prefix per test)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.api_core.exceptions import AlreadyExists, NotFound
from google.cloud import pubsub_v1
from pydantic import SecretStr
from sqlalchemy import func, select

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.settings import Settings
from noetl_cloud.settings import events_topic_for as events_topic_for  # the tests import it from here

TOKEN = "integration-token"
PROJECT = "noetl-local"

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: {name}
  path: {path}
workload:
  greeting: hello
workflow:
  - step: start
    tool:
      kind: noop
    next:
      spec: {{mode: exclusive}}
      arcs:
        - step: end
  - step: end
    tool:
      kind: noop
"""


PullSource = tuple[pubsub_v1.PublisherClient, str, str]


def pull_source(prefix: str) -> Iterator[PullSource]:
    """A fresh topic and pull subscription ``<prefix>-<random>`` on the emulator: (publisher, topic
    path, subscription path) until the generator is closed, then both are deleted (a fixture's body)."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    suffix = secrets.token_hex(4)
    topic = publisher.topic_path(PROJECT, f"{prefix}-{suffix}")
    name = subscriber.subscription_path(PROJECT, f"{prefix}-{suffix}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=name, topic=topic, ack_deadline_seconds=10)
    yield publisher, topic, name
    subscriber.delete_subscription(subscription=name)
    publisher.delete_topic(topic=topic)
    subscriber.close()


def playbook(path: str) -> str:
    return PLAYBOOK.format(name=path.rsplit("/", 1)[-1], path=path)


@dataclass
class Topics:
    prefix: str
    subscriber: pubsub_v1.SubscriberClient
    subscriptions: dict[str, str]

    def pull(self, pool: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
        """Pull until ``expected`` messages arrived (acking them) or the time is up."""
        received: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(received) < expected and time.monotonic() < deadline:
            response = self.subscriber.pull(
                subscription=self.subscriptions[pool], max_messages=1000, timeout=10, return_immediately=False
            )
            if response.received_messages:
                received += [m.message for m in response.received_messages]
                self.subscriber.acknowledge(
                    subscription=self.subscriptions[pool], ack_ids=[m.ack_id for m in response.received_messages]
                )
        return received


def make_settings(database_url: str, env: dict[str, str], prefix: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "environment": "test",
        "database_url": database_url,
        "project_id": PROJECT,
        "pubsub_emulator_host": env["PUBSUB_EMULATOR_HOST"],
        "pools": ("shared", "iot"),
        "command_topic_prefix": prefix,
        "events_topic": events_topic_for(prefix),
        "internal_api_token": SecretStr(TOKEN),
        "db_pool_size": 10,
        "db_max_overflow": 20,
        "role": "execute",
        # These tests read the outbox right after a request: publish inside it, and no periodic sweep
        # (the background relay has tests of its own: test_outbox_relay.py).
        "outbox_publish": "inline",
        "outbox_sweep_every_s": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def topic_prefix() -> str:
    return f"t{secrets.token_hex(4)}-commands-"


@pytest.fixture
def control_settings(database_url: str, local_env: dict[str, str], topic_prefix: str) -> Settings:
    return make_settings(database_url, local_env, topic_prefix)


@contextmanager
def command_topics(settings: Settings) -> Iterator[Topics]:
    """The command topics of ``settings``' pools, a pull subscription on each, and its events topic, on
    the emulator; deleted when the block ends."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    subs: dict[str, str] = {}
    for pool in settings.pools:
        topic = publisher.topic_path(PROJECT, settings.command_topic(pool))
        publisher.create_topic(name=topic)
        subs[pool] = subscriber.subscription_path(PROJECT, settings.command_topic(pool))
        subscriber.create_subscription(name=subs[pool], topic=topic, ack_deadline_seconds=60)
    # Created without a subscription: the emulator drops what is published to it.
    events = publisher.topic_path(PROJECT, events_topic_for(settings.command_topic_prefix))
    try:
        publisher.create_topic(name=events)
    except AlreadyExists:
        pass
    try:
        yield Topics(settings.command_topic_prefix, subscriber, subs)
    finally:
        try:
            publisher.delete_topic(topic=events)
        except NotFound:
            pass
        for pool, sub in subs.items():
            try:
                subscriber.delete_subscription(subscription=sub)
            except NotFound:
                pass
            try:
                publisher.delete_topic(topic=publisher.topic_path(PROJECT, settings.command_topic(pool)))
            except NotFound:
                pass
        subscriber.close()


@pytest.fixture
def topics(control_settings: Settings) -> Iterator[Topics]:
    with command_topics(control_settings) as created:
        yield created


@pytest.fixture
def plane(control_settings: Settings) -> Iterator[ControlPlane]:
    plane = ControlPlane(control_settings, env={"NOETL_SECRET_GH_WEBHOOK": "s3cret-value"})
    yield plane
    plane.relay.close()
    plane.engine.dispose()


@pytest.fixture
def client(plane: ControlPlane) -> FlaskClient:
    app = build_app(plane, InternalAuth(token=TOKEN))
    test_client = app.test_client()
    test_client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return test_client


@pytest.fixture
def ready(client: FlaskClient) -> FlaskClient:
    """The control plane's client with the playbook ``domain/handle`` registered."""
    register(client, playbook("domain/handle"))
    return client


def count_rows(plane: ControlPlane, table: Any, *where: Any) -> int:
    """Rows of ``table`` (a SQLAlchemy table) matching ``where``."""
    with plane.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def register(client: FlaskClient, content: str) -> dict[str, Any]:
    response = client.post("/api/catalog", data=content, content_type="application/yaml")
    assert response.status_code in (200, 201), response.get_json()
    return response.get_json()  # type: ignore[no-any-return]
