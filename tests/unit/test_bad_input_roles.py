"""The public ingress and the worker's push endpoint under bad input (hypothesis): malformed paths,
queries, headers and bodies, with and without valid credentials, get a JSON error, never a 500."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.ingress.app import build_app as ingress_app
from noetl_cloud.ingress.listeners import ListenerDirectory
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.settings import Settings
from noetl_cloud.web.client import ApiResponse
from noetl_cloud.worker.app import build_app as worker_app
from noetl_cloud.worker.service import Handled, Notification
from tests.bad_input import check, requests

TOKEN = "hooks-token-0123456789abcdef"
CONFIG: dict[str, Any] = {
    "listener": "hooks",
    "path": "subscriptions/hooks",
    "subscription_id": "7",
    "state": "active",
    "source": "webhook",
    "verify": {"type": "bearer", "secret": TOKEN},
    "dispatch": {"playbook": "domain/handle", "payload_from": "message.json"},
    "headers": {},
    "dedup": {},
}


class ControlPlane:
    """Answers the listener lookup for ``hooks`` (404 otherwise) and accepts every forward."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)

    def get(self, path: str, **_kw: Any) -> ApiResponse:
        if path == "/api/internal/ingress/hooks":
            return ApiResponse(200, CONFIG, {})
        return ApiResponse(404, {"error": {"code": "unknown_listener", "message": "no"}}, {})

    def post(self, path: str, json: Any = None, **_kw: Any) -> ApiResponse:
        return ApiResponse(202, {"execution_id": str(next(self.ids)), "status": "started"}, {})


def test_the_ingress_answers_bad_input_with_json_errors() -> None:
    api = ControlPlane()
    ids = itertools.count()
    service = IngressService(
        ListenerDirectory(api),  # type: ignore[arg-type]
        api,  # type: ignore[arg-type]
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,  # type: ignore[arg-type,return-value]
    )
    app = ingress_app(Settings(), service)
    targets = st.sampled_from(["/ingress/hooks", "/ingress/unknown", "/ingress/hooks/extra", "/ingress/"])

    @settings(max_examples=300, deadline=None)
    @given(data=st.data(), path=targets, authorized=st.booleans())
    def run(data: st.DataObject, path: str, authorized: bool) -> None:
        request = data.draw(requests(app))
        request["path"] = path if data.draw(st.booleans()) else request["path"]
        check(app.test_client(), request, {"Authorization": f"Bearer {TOKEN}"} if authorized else {})

    run()


class Worker:
    def handle(self, notification: Notification) -> Handled:
        return Handled("reported", notification.command_id, "ok")


def test_the_worker_push_endpoint_answers_bad_input_with_json_errors() -> None:
    app = worker_app(Settings(), Worker(), InternalAuth(token="push-token-0123456789"))

    @settings(max_examples=200, deadline=None)
    @given(data=st.data(), authorized=st.booleans())
    def run(data: st.DataObject, authorized: bool) -> None:
        headers = {"Authorization": "Bearer push-token-0123456789"} if authorized else {}
        check(app.test_client(), data.draw(requests(app)), headers)

    run()
