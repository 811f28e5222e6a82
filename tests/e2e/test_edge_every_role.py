"""Every role of the local stack, as its deployable runs (gunicorn), under input that answered 500
(issue #21 item 5): a JSON body nested thousands deep on every POST route, and an event id past a
bigint on the projector. Each answer is a 4xx in the JSON error model (or a 2xx for a route that
reads no body); never a 5xx."""

from __future__ import annotations

import base64
import importlib
import json
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from tests.e2e.roles import role_group
from tests.integration.control_fixtures import TOKEN, Topics, events_topic_for

PUSH_TOKEN = secrets.token_hex(16)
DEEP = b"[" * 5000 + b"]" * 5000
APPS = {
    "execute": "noetl_cloud.control.app",
    "ingress": "noetl_cloud.ingress.app",
    "worker": "noetl_cloud.worker.app",
    "projector": "noetl_cloud.projector.app",
    "frames": "noetl_cloud.frames.app",
    "spool_drainer": "noetl_cloud.spool.app",
}
#: Routes that take no body: a deep one is ignored, the answer is theirs.
NO_BODY = {
    "/api/internal/reaper",
    "/api/internal/retention",
    "/api/internal/outbox/sweep",
    "/api/internal/subscriptions/tick",
    "/api/internal/projector/catch-up",
    "/api/internal/frames/reap",
}
_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
HTTP = urllib3.PoolManager(retries=False)


@pytest.fixture
def roles(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics, tmp_path: Any
) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Every HTTP role on a fresh database: (their env, their base URLs)."""
    env = {
        **local_env,
        "NOETL_DATABASE_URL": database_url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": topic_prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(topic_prefix),
        "NOETL_POOLS": "shared",
        "NOETL_WORKER_POOL": "shared",
        "NOETL_WORKER_PUSH_TOKEN": PUSH_TOKEN,
        "NOETL_PROJECTOR_PUSH_TOKEN": PUSH_TOKEN,
        "NOETL_SPOOL_BACKEND": "local_disk",
        "NOETL_SPOOL_DIR": str(tmp_path / "spool"),
    }

    def after_execute(urls: dict[str, str]) -> dict[str, str]:
        env["NOETL_API_URL"] = env["NOETL_FRAMES_URL"] = urls["execute"]
        return env

    others = [(name, after_execute) for name in ("ingress", "worker", "projector", "frames", "spool_drainer")]
    with role_group(("execute", dict(env)), *others, workers=1, threads=2) as urls:
        yield env, urls


def post_routes(module: str, env: dict[str, str]) -> list[str]:
    """Every POST route of a role's app (built, not served: nothing connects until a request)."""
    app = importlib.import_module(module).app_from_env(env)
    sample = {"int": "1", "listener": "hooks", "path": "x/y", None: "activate"}
    return sorted(
        _CONVERTER.sub(lambda m: sample.get(m.group(1), "x"), rule.rule)
        for rule in app.url_map.iter_rules()
        if "POST" in (rule.methods or ())
    )


def test_a_body_nested_thousands_deep_is_a_4xx_on_every_post_route_of_every_role(
    roles: tuple[dict[str, str], dict[str, str]],
) -> None:
    env, urls = roles
    answered: dict[str, int] = {}
    for name, module in APPS.items():
        for path in post_routes(module, env):
            token = PUSH_TOKEN if path == "/" else TOKEN
            response = HTTP.request(
                "POST",
                urls[name] + path,
                body=DEEP,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            answered[f"{name} {path}"] = response.status
            assert response.status < 500, (name, path, response.status, response.data[:300])
            if path not in NO_BODY:
                assert 400 <= response.status < 500, (name, path, response.status)
                assert isinstance(json.loads(response.data).get("error"), dict), (name, path)
    assert len(answered) >= 20 and answered["execute /api/execute"] == 400


def test_an_event_id_past_a_bigint_is_a_4xx_on_the_projector(roles: tuple[dict[str, str], dict[str, str]]) -> None:
    _env, urls = roles
    for event_id in ("9999999999999999999", "9223372036854775808", "²"):
        data = base64.b64encode(json.dumps({"event_id": event_id, "execution_id": "1"}).encode()).decode()
        response = HTTP.request(
            "POST",
            urls["projector"] + "/",
            body=json.dumps({"message": {"data": data, "messageId": "1"}}).encode(),
            headers={"Authorization": f"Bearer {PUSH_TOKEN}", "Content-Type": "application/json"},
        )
        assert response.status == 400, (event_id, response.status, response.data)
        assert json.loads(response.data)["error"]["code"] == "invalid_notification"
