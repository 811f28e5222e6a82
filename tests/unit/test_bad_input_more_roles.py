"""The spool drainer's ``POST /drain`` and the subscription runtime's health server under bad input
(hypothesis): malformed paths, queries and bodies, with and without credentials, get a JSON error,
never a 500. The drainer's control plane answers from memory (our own API client's port), its spool is
a local folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.runtime.health import build_app as runtime_app
from noetl_cloud.settings import Settings
from noetl_cloud.spool.app import build_app as drainer_app
from noetl_cloud.spool.bootstrap import ApiReplayer, CatalogTargets, DrainService, build_engine
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.web.client import ApiResponse
from tests.bad_input import check, requests, routes

TOKEN = "drain-token-0123456789abcdef"


class Catalog:
    """A control plane whose catalog holds no subscription: every drain names an unknown one."""

    def get(self, path: str, **_kw: Any) -> ApiResponse:
        if path == "/api/subscriptions":
            return ApiResponse(200, {"subscriptions": []}, {})
        return ApiResponse(404, {"error": {"code": "not_found", "message": "no such catalog entry"}}, {})

    def post(self, path: str, json: Any = None, **_kw: Any) -> ApiResponse:
        return ApiResponse(201, {"event_id": "1"}, {})


def test_the_drainer_answers_bad_input_with_json_errors(tmp_path: Path) -> None:
    config = Settings(spool_backend="local_disk", spool_dir=str(tmp_path))
    api = Catalog()
    engine = build_engine(config, api, InMemoryKeyValueStore())
    service = DrainService(
        Drainer(engine, ApiReplayer(api), lease_ttl_s=30, budget_s=5), CatalogTargets(api, "execute")
    )
    app = drainer_app(config, service, InternalAuth(token=TOKEN))
    assert ("/drain", ("POST",)) in routes(app)

    @settings(max_examples=200, deadline=None)
    @given(data=st.data(), authorized=st.booleans())
    def run(data: st.DataObject, authorized: bool) -> None:
        check(app.test_client(), data.draw(requests(app)), {"Authorization": f"Bearer {TOKEN}"} if authorized else {})

    run()
    answer = app.test_client().post(
        "/drain", json={"subscription": "subs/none"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 200
    assert answer.get_json() == {"results": [{"subscription": "subs/none", "state": "unknown_subscription"}]}


def test_the_runtime_health_server_answers_bad_input_with_json_errors() -> None:
    app = runtime_app(Settings(), None)
    assert {rule for rule, _ in routes(app)} >= {"/healthz", "/readyz", "/status", "/metrics"}

    @settings(max_examples=150, deadline=None)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check(app.test_client(), data.draw(requests(app)))

    run()
