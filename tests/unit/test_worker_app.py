"""The worker's push endpoint: authentication first (Google ID token of the push service account, or the
local bearer), then the push envelope, then the service; JSON errors with stable codes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from pydantic import SecretStr

from noetl_cloud.auth.google_oidc import JwksCache
from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings
from noetl_cloud.web.client import UpstreamUnavailable
from noetl_cloud.worker.app import auth_from_settings, build_app, default_worker_id, service_from_settings
from noetl_cloud.worker.service import Handled, Notification
from tests.unit.test_google_oidc import AUDIENCE, NOW, SA, FakeGoogle

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "local-push-token-0123456789"
NOTE = {"execution_id": "2001", "command_id": "3001", "event_id": "9", "step": "fetch", "attempt": 1}


class FakeService:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.notifications: list[Notification] = []

    def handle(self, notification: Notification) -> Handled:
        self.notifications.append(notification)
        if self.fail is not None:
            raise self.fail
        return Handled("reported", notification.command_id, "ok")


@pytest.fixture
def google() -> FakeGoogle:
    return FakeGoogle()


@pytest.fixture
def fake() -> FakeService:
    return FakeService()


def client_for(google: FakeGoogle, service: FakeService, settings: Settings | None = None) -> FlaskClient:
    auth = InternalAuth(
        token=TOKEN,
        audience=AUDIENCE,
        allowed_emails=[SA],
        keys=JwksCache(fetch=google.fetch, clock=lambda: 0.0),
        now=lambda: NOW,
    )
    return build_app(settings or Settings(), service, auth).test_client()


@pytest.fixture
def client(google: FakeGoogle, fake: FakeService) -> FlaskClient:
    return client_for(google, fake)


def envelope(data: Any = NOTE, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return {
        "message": {
            "data": base64.b64encode(raw).decode(),
            "attributes": attributes or {},
            "messageId": "m-1",
            "publishTime": "2026-11-22T10:00:00Z",
        },
        "subscription": "projects/p/subscriptions/noetl-commands-shared-push",
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def error_of(response: Any) -> tuple[int, str]:
    return response.status_code, response.get_json()["error"]["code"]


# -- authentication -----------------------------------------------------------------------------------------------


def test_a_push_without_credentials_is_401_json_and_never_reaches_the_service(
    client: FlaskClient, fake: FakeService
) -> None:
    assert error_of(client.post("/", json=envelope())) == (401, "missing_credentials")
    assert fake.notifications == []


def test_a_wrong_bearer_token_is_401(client: FlaskClient, fake: FakeService) -> None:
    assert error_of(client.post("/", json=envelope(), headers=bearer("nope"))) == (401, "bad_credentials")
    assert fake.notifications == []


def test_an_id_token_of_another_service_account_is_403(
    client: FlaskClient, fake: FakeService, google: FakeGoogle
) -> None:
    token = google.mint(email="someone@else.iam.gserviceaccount.com")
    assert error_of(client.post("/", json=envelope(), headers=bearer(token))) == (403, "oidc_wrong_sa")
    assert fake.notifications == []


def test_an_id_token_for_another_audience_is_401(client: FlaskClient, fake: FakeService, google: FakeGoogle) -> None:
    token = google.mint(aud="https://elsewhere.example")
    assert error_of(client.post("/", json=envelope(), headers=bearer(token))) == (401, "oidc_wrong_audience")
    assert fake.notifications == []


def test_the_push_service_accounts_id_token_is_accepted(
    client: FlaskClient, fake: FakeService, google: FakeGoogle
) -> None:
    response = client.post("/", json=envelope(), headers=bearer(google.mint()))
    assert response.status_code == 200
    assert response.get_json() == {"outcome": "reported", "command_id": "3001", "status": "ok"}
    assert fake.notifications == [Notification("2001", "3001", "9", "fetch", 1)]


def test_the_local_bearer_token_is_accepted(client: FlaskClient, fake: FakeService) -> None:
    assert client.post("/", json=envelope(), headers=bearer(TOKEN)).status_code == 200
    assert [n.command_id for n in fake.notifications] == ["3001"]


def test_the_local_push_token_may_come_in_the_endpoint_query_for_the_emulator(
    google: FakeGoogle, fake: FakeService
) -> None:
    local = client_for(google, fake, Settings(worker_push_token=SecretStr(TOKEN)))
    assert local.post(f"/?token={TOKEN}", json=envelope()).status_code == 200
    assert error_of(local.post("/?token=nope", json=envelope())) == (401, "bad_credentials")
    assert [n.command_id for n in fake.notifications] == ["3001"]


def test_the_query_token_is_ignored_without_a_configured_push_token(client: FlaskClient, fake: FakeService) -> None:
    assert error_of(client.post(f"/?token={TOKEN}", json=envelope())) == (401, "missing_credentials")
    assert fake.notifications == []


# -- the envelope -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("data", "%%% not base64 %%%"), ("data", {"a": 1}), ("data", 7), ("attributes", ["a"])]
)
def test_data_that_is_not_base64_or_attributes_that_are_not_an_object_are_400(
    client: FlaskClient, fake: FakeService, field: str, value: Any
) -> None:
    body = envelope()
    body["message"][field] = value  # the schemathesis run found a dict in data answered 500
    assert error_of(client.post("/", json=body, headers=bearer(TOKEN))) == (400, "invalid_payload")
    assert fake.notifications == []


@pytest.mark.parametrize("data", [b"not json", {"execution_id": "2001"}, {"command_id": "x", "execution_id": "1"}])
def test_a_message_without_a_notification_is_400(client: FlaskClient, fake: FakeService, data: Any) -> None:
    response = client.post("/", json=envelope(data), headers=bearer(TOKEN))
    assert error_of(response) == (400, "invalid_notification")
    assert fake.notifications == []


def test_the_attributes_carry_the_notification_when_the_data_is_not_an_object(
    client: FlaskClient, fake: FakeService
) -> None:
    attributes = {"execution_id": "2001", "command_id": "3001", "attempt": "2", "traceparent": "00-ab-cd-01"}
    response = client.post("/", json=envelope(b"", attributes), headers=bearer(TOKEN))
    assert response.status_code == 200
    assert fake.notifications == [Notification("2001", "3001", None, None, 2, "00-ab-cd-01")]


def test_an_unwrapped_push_carries_the_notification_as_its_body(client: FlaskClient, fake: FakeService) -> None:
    headers = {**bearer(TOKEN), "x-goog-pubsub-message-id": "m-2"}
    assert client.post("/", data=json.dumps(NOTE), headers=headers).status_code == 200
    assert [n.command_id for n in fake.notifications] == ["3001"]


# -- answers ------------------------------------------------------------------------------------------------------


def test_an_unreachable_control_plane_is_503_json_so_pubsub_redelivers(google: FakeGoogle) -> None:
    client = client_for(google, FakeService(fail=UpstreamUnavailable("the API could not be reached")))
    response = client.post("/", json=envelope(), headers=bearer(TOKEN))
    assert error_of(response) == (503, "upstream_unavailable")
    assert "Bearer" not in response.get_data(as_text=True)


def test_healthz_needs_no_credentials(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.get_json() == {"status": "ok", "role": "worker"}


# -- configuration ------------------------------------------------------------------------------------------------


def test_without_any_push_authentication_the_worker_does_not_start() -> None:
    with pytest.raises(ConfigError) as info:
        auth_from_settings(Settings.from_env({}))
    assert "NOETL_WORKER_PUSH_TOKEN" in info.value.message and "NOETL_WORKER_PUSH_AUDIENCE" in info.value.message


def test_a_push_audience_needs_the_push_service_account() -> None:
    with pytest.raises(ConfigError) as info:
        auth_from_settings(Settings.from_env({"NOETL_WORKER_PUSH_AUDIENCE": AUDIENCE}))
    assert "NOETL_WORKER_PUSH_SERVICE_ACCOUNT" in info.value.message


def test_push_authentication_modes_follow_the_settings() -> None:
    env = {"NOETL_WORKER_PUSH_AUDIENCE": AUDIENCE, "NOETL_WORKER_PUSH_SERVICE_ACCOUNT": SA}
    assert auth_from_settings(Settings.from_env(env)).methods == ("google_id_token",)
    assert auth_from_settings(Settings.from_env({"NOETL_WORKER_PUSH_TOKEN": TOKEN})).methods == ("bearer",)


def test_the_service_needs_the_api_url_and_takes_the_worker_settings() -> None:
    with pytest.raises(ConfigError) as info:
        service_from_settings(Settings.from_env({}))
    assert "NOETL_API_URL" in info.value.message
    env = {
        "NOETL_API_URL": "http://127.0.0.1:9",
        "NOETL_INTERNAL_API_TOKEN": "t",
        "NOETL_WORKER_ID": "worker-iot-7",
        "NOETL_WORKER_HEARTBEAT_S": "2.5",
    }
    service = service_from_settings(Settings.from_env(env))
    assert (service.worker_id, service.heartbeat_s) == ("worker-iot-7", 2.5)
    assert service_from_settings(Settings.from_env({**env, "NOETL_WORKER_ID": ""})).worker_id.startswith(
        "worker-shared-"
    )


def test_secrets_of_the_worker_never_print() -> None:
    settings = Settings.from_env({"NOETL_WORKER_PUSH_TOKEN": TOKEN})
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())


def test_the_default_worker_id_names_pool_host_and_process() -> None:
    worker_id = default_worker_id("iot")
    assert worker_id.startswith("worker-iot-") and worker_id.endswith(f"-{os.getpid()}")


PROBE = """
import json, sys
sys.path.insert(0, "functions/worker")
import main
assert main.app._app is None  # importing the entry point builds nothing
env = {"NOETL_API_URL": "http://127.0.0.1:9", "NOETL_INTERNAL_API_TOKEN": "t", "NOETL_WORKER_PUSH_TOKEN": "p"}
from noetl_cloud.worker.app import app_from_env
client = app_from_env(env).test_client()
print(json.dumps([client.get("/healthz").status_code, client.post("/", json={}).status_code]))
"""


def test_the_entry_point_is_lazy_and_app_from_env_builds_the_role() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [200, 401]
