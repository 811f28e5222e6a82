"""The drainer's app from its environment: locally (a bearer token, no Google ID tokens) knowing its own
URL does not switch it to ID-token mode; in Google Cloud its own URL is the audience it checks."""

from __future__ import annotations

import pytest

from noetl_cloud.errors import ConfigError
from noetl_cloud.spool.app import app_from_env

LOCAL = {
    "NOETL_INTERNAL_API_TOKEN": "drain-token-0123456789",
    "NOETL_API_URL": "http://127.0.0.1:9",
    "NOETL_SPOOL_DRAINER_URL": "http://127.0.0.1:15445",  # the ingress asks it to drain when a circuit closes
}


def test_locally_the_drainer_starts_with_its_url_set_and_takes_the_bearer_token() -> None:
    client = app_from_env(LOCAL).test_client()
    assert client.get("/healthz").status_code == 200
    refused = client.post("/drain", json={}, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.get_json()["error"]["code"]


def test_with_id_tokens_the_drainer_needs_its_callers_and_checks_its_own_url() -> None:
    cloud = {
        **LOCAL,
        "NOETL_INTERNAL_API_AUDIENCE": "https://execute.example.run.app",
        "NOETL_SPOOL_DRAINER_URL": "https://drainer.example.run.app",
    }
    with pytest.raises(ConfigError, match="allowed service account"):
        app_from_env(cloud)
    app = app_from_env({**cloud, "NOETL_INTERNAL_API_CALLERS": "scheduler=noetl-scheduler@p.iam.gserviceaccount.com"})
    assert app.test_client().get("/healthz").status_code == 200
