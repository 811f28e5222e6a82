"""The control plane's ``/api/spool/*``: forwarded to the drainer with the caller's own credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask

from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.control import spool_proxy
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app

TOKEN = "operator-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def drainer() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": self.rfile.read(length).decode() if length else None,
                }
            )
            body = json.dumps({"error": {"code": "operation_not_found", "message": "no"}}).encode()
            self.send_response(404 if "resends/" in self.path else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def app(drainer_url: str | None) -> Flask:
    settings = Settings(spool_drainer_url=drainer_url)
    built = create_app("execute", settings)
    install(built, InternalAuth(token=TOKEN))
    built.register_blueprint(spool_proxy.blueprint(settings))
    return built


def test_spool_routes_are_forwarded_with_the_callers_credentials(drainer: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = drainer
    client = app(url).test_client()
    listed = client.get("/api/spool/dead-letters?subscription=a%2Fb&lane=k-1", headers=AUTH)
    assert listed.status_code == 200
    posted = client.post("/api/spool/resends", json={"subscription": "a/b"}, headers=AUTH)
    assert posted.status_code == 200
    missing = client.get("/api/spool/resends/abc", headers=AUTH)  # the drainer's own error passes through
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "operation_not_found"
    assert [(s["method"], s["path"], s["authorization"]) for s in seen] == [
        ("GET", "/api/spool/dead-letters?subscription=a%2Fb&lane=k-1", f"Bearer {TOKEN}"),
        ("POST", "/api/spool/resends", f"Bearer {TOKEN}"),
        ("GET", "/api/spool/resends/abc", f"Bearer {TOKEN}"),
    ]
    assert json.loads(seen[1]["body"]) == {"subscription": "a/b"}


def test_nothing_is_forwarded_without_credentials_or_outside_the_spool_paths(
    drainer: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = drainer
    client = app(url).test_client()
    assert client.get("/api/spool/subscriptions").status_code == 401
    dotted = client.get("/api/spool/../drain", headers=AUTH)
    assert dotted.status_code == 404
    odd = client.get("/api/spool/a/.x", headers=AUTH)
    assert odd.status_code == 404 and odd.get_json()["error"]["code"] == "route_not_found"
    assert seen == []


def test_without_a_drainer_or_with_one_down_the_answer_is_a_json_503() -> None:
    unset = app(None).test_client().get("/api/spool/subscriptions", headers=AUTH)
    assert unset.status_code == 503 and unset.get_json()["error"]["code"] == "spool_drainer_not_configured"
    down = app("http://127.0.0.1:9").test_client().get("/api/spool/subscriptions", headers=AUTH)
    assert down.status_code == 503 and down.get_json()["error"]["code"] == "spool_drainer_unavailable"


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b"[" * 5000 + b"]" * 5000])
def test_a_post_body_that_is_not_a_json_object_is_the_callers_400_and_is_not_forwarded(
    drainer: tuple[str, list[dict[str, Any]]], body: bytes
) -> None:
    url, seen = drainer
    answer = (
        app(url)
        .test_client()
        .post("/api/spool/resends", data=body, headers={**AUTH, "Content-Type": "application/json"})
    )
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == "invalid_json"
    assert seen == []
