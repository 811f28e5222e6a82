"""The execute role as its deployable runs it: gunicorn serving functions/execute/main.py, called
over HTTP with the shared API client, publishing to the Pub/Sub emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import role
from tests.integration.control_fixtures import TOKEN, Topics, events_topic_for, playbook


@pytest.fixture
def role_url(database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics) -> Iterator[str]:
    env = {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": topic_prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(topic_prefix),
        "NOETL_POOLS": "shared,iot",
    }
    with role("execute", env) as url:
        yield url


def test_execute_role_serves_catalog_executions_and_subscriptions_over_http(role_url: str, topics: Topics) -> None:
    with ApiClient(role_url, token_source=static_token(TOKEN)) as api:
        assert api.post("/api/catalog", json={"content": playbook("domain/handle")}).status == 201
        single = api.post("/api/execute", json={"path": "domain/handle", "workload": {"a": 1}}).raise_for_error()
        assert single.status == 202 and single.json["status"] == "started"
        batch = api.post(
            "/api/execute/batch",
            json={"executions": [{"path": "domain/handle", "execution_pool": "iot"} for _ in range(25)]},
        ).raise_for_error()
        assert batch.json["started"] == 25
        detail = api.get(f"/api/executions/{single.json['execution_id']}").raise_for_error()
        assert detail.json["event_count"] == 3  # playbook.started, step.started, command.issued
        missing = api.post("/api/execute", json={"path": "domain/none"})
        assert missing.status == 404 and missing.json["error"]["code"] == "playbook_not_found"
    assert json.loads(topics.pull("shared", 1)[0].data)["execution_id"] == single.json["execution_id"]
    assert len(topics.pull("iot", 25)) == 25


def test_execute_role_refuses_callers_without_the_token(role_url: str) -> None:
    with ApiClient(role_url, token_source=static_token("wrong")) as api:
        response = api.get("/api/catalog")
    assert response.status == 401 and response.json["error"]["code"] == "bad_credentials"
