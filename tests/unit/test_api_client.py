from __future__ import annotations

import contextvars
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from noetl_cloud.errors import Conflict, NoetlError, NotFound, Unavailable
from noetl_cloud.observability import TraceContext, current_request_id, current_trace
from noetl_cloud.web.client import (
    ApiClient,
    ApiResponse,
    UpstreamUnavailable,
    _retry_after_s,
    static_token,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptedServer:
    """A real HTTP server on 127.0.0.1 answering from a script, recording every request."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                reply = server.script.pop(0) if server.script else Reply()
                if reply.hang:
                    server.release.wait(5)
                    return
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Length", str(len(data)))
                if not isinstance(reply.body, bytes):
                    self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def client_for(url: str, sleeps: Sleeps, **kwargs: Any) -> ApiClient:
    options: dict[str, Any] = {"token_source": static_token("tok"), "sleep": sleeps, "jitter": lambda: 1.0}
    options.update(kwargs)
    return ApiClient(url, **options)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- retries -------------------------------------------------------------------------------------


def test_503_then_200_is_retried_after_a_backoff(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(503, {"error": {"code": "unavailable", "message": "db"}}), Reply(200, {"id": "1"})]
    with client_for(server.url, sleeps) as client:
        response = client.request("GET", "/api/executions/1")
    assert (response.status, response.json) == (200, {"id": "1"})
    assert len(server.seen) == 2
    assert sleeps == [0.2]


@pytest.mark.parametrize("status", [502, 503, 504])
def test_retryable_status_until_retries_run_out_is_upstream_unavailable(
    server: ScriptedServer, sleeps: Sleeps, status: int
) -> None:
    server.script = [Reply(status)] * 4
    with pytest.raises(UpstreamUnavailable) as info:
        client_for(server.url, sleeps).request("POST", "/api/events", json={"a": 1})
    err = info.value
    assert isinstance(err, Unavailable)
    assert (err.status, err.code, err.retryable) == (503, "upstream_unavailable", True)
    assert err.details["status"] == status and err.details["attempts"] == 4
    assert len(server.seen) == 4
    assert sleeps == [0.2, 0.4, 0.8]


def test_backoff_is_jittered_and_capped(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(503)] * 6
    client = client_for(server.url, sleeps, retries=5, backoff_s=1.0, max_backoff_s=3.0, jitter=lambda: 0.0)
    with pytest.raises(UpstreamUnavailable):
        client.get("/api/x")
    assert sleeps == [0.5, 1.0, 1.5, 1.5, 1.5]


def test_500_is_a_bug_and_is_not_retried(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(500, {"error": {"code": "internal_error", "message": "internal error"}})]
    response = client_for(server.url, sleeps).get("/api/x")
    assert response.status == 500
    assert len(server.seen) == 1 and sleeps == []
    with pytest.raises(NoetlError) as info:
        response.raise_for_error()
    assert (info.value.status, info.value.code, info.value.retryable) == (500, "internal_error", False)


def test_429_waits_out_retry_after(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(429, headers={"Retry-After": "7"}), Reply(200)]
    assert client_for(server.url, sleeps).get("/api/x").status == 200
    assert sleeps == [7.0]


def test_429_without_retry_after_uses_the_backoff(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(429), Reply(200)]
    assert client_for(server.url, sleeps).get("/api/x").status == 200
    assert sleeps == [0.2]


def test_retry_after_beyond_the_cap_ends_the_retries_and_is_passed_on(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(429, headers={"Retry-After": "120"}), Reply(200)]
    with pytest.raises(UpstreamUnavailable) as info:
        client_for(server.url, sleeps, max_retry_after_s=30).get("/api/x")
    assert info.value.retry_after == 120
    assert len(server.seen) == 1 and sleeps == []


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert _retry_after_s("3") == 3.0
    assert _retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0) == 10.0
    assert _retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412490.0) == 0.0
    assert _retry_after_s("soon") is None
    assert _retry_after_s(None) is None


def test_connection_refused_is_retried_then_upstream_unavailable(sleeps: Sleeps) -> None:
    client = client_for(f"http://127.0.0.1:{unused_port()}", sleeps)
    with pytest.raises(UpstreamUnavailable) as info:
        client.get("/api/x")
    assert info.value.details["attempts"] == 4
    assert info.value.details["reason"] == "ConnectionRefusedError"
    assert sleeps == [0.2, 0.4, 0.8]


def test_read_timeout_is_retried(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(hang=True), Reply(200, {"ok": 1})]
    response = client_for(server.url, sleeps, timeout_s=0.3).get("/api/x")
    assert response.json == {"ok": 1}
    assert len(server.seen) == 2 and sleeps == [0.2]


# -- answers and error mapping -------------------------------------------------------------------


def test_4xx_is_returned_and_maps_to_the_matching_error(server: ScriptedServer, sleeps: Sleeps) -> None:
    error = {"code": "execution_not_found", "message": "no such execution", "details": {"id": "9"}}
    server.script = [Reply(404, {"error": error}), Reply(409, {"error": {"code": "claimed", "message": "taken"}})]
    client = client_for(server.url, sleeps)
    response = client.get("/api/executions/9")
    assert (response.status, response.ok) == (404, False)
    with pytest.raises(NotFound) as info:
        response.raise_for_error()
    assert (info.value.status, info.value.code, info.value.message) == (404, "execution_not_found", "no such execution")
    assert info.value.details == {"id": "9"}
    with pytest.raises(Conflict) as conflict:
        client.post("/api/claims", json={}).raise_for_error()
    assert conflict.value.code == "claimed"
    assert len(server.seen) == 2 and sleeps == []


def test_error_without_the_json_model_gets_a_code_from_its_status(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(418, b"<html>teapot</html>"), Reply(400, b"nope")]
    client = client_for(server.url, sleeps)
    with pytest.raises(NoetlError) as info:
        client.get("/api/x").raise_for_error()
    assert (info.value.status, info.value.code) == (418, "http_418")
    with pytest.raises(NoetlError) as bad:
        client.get("/api/x").raise_for_error()
    assert (bad.value.status, bad.value.code) == (400, "bad_request")


def test_success_passes_raise_for_error_and_exposes_headers(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script = [Reply(201, {"id": "e1"}, headers={"X-Thing": "v"})]
    response = client_for(server.url, sleeps).post("/api/executions", json={"playbook": "p"})
    assert response.raise_for_error() is response
    assert response.headers["x-thing"] == "v"
    assert isinstance(response, ApiResponse)


# -- what is sent --------------------------------------------------------------------------------


def test_json_body_token_and_accept_are_sent(server: ScriptedServer, sleeps: Sleeps) -> None:
    client_for(server.url, sleeps).request("PUT", "/api/things/1", json={"b": [1, 2]})
    seen = server.seen[0]
    assert (seen.method, seen.path) == ("PUT", "/api/things/1")
    assert json.loads(seen.body) == {"b": [1, 2]}
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["authorization"] == "Bearer tok"
    assert seen.headers["accept"] == "application/json"


def test_current_trace_is_sent_as_a_child_span_with_the_request_id(server: ScriptedServer, sleeps: Sleeps) -> None:
    parent = TraceContext.parse(TRACEPARENT, "congo=t61rcWkgMzE")
    trace_token, request_token = current_trace.set(parent), current_request_id.set("req-42")
    try:
        client_for(server.url, sleeps).get("/api/x")
    finally:
        current_trace.reset(trace_token)
        current_request_id.reset(request_token)
    sent = server.seen[0].headers
    child = TraceContext.parse(sent["traceparent"])
    assert parent is not None and child is not None
    assert child.trace_id == parent.trace_id and child.span_id != parent.span_id and child.flags == "01"
    assert sent["tracestate"] == "congo=t61rcWkgMzE"
    assert sent["x-request-id"] == "req-42"


def test_caller_supplied_trace_and_headers_win(server: ScriptedServer, sleeps: Sleeps) -> None:
    token = current_trace.set(TraceContext.new())
    try:
        client_for(server.url, sleeps).get("/api/x", headers={"traceparent": TRACEPARENT, "Authorization": "Bearer o"})
    finally:
        current_trace.reset(token)
    sent = server.seen[0].headers
    assert sent["traceparent"] == TRACEPARENT
    assert sent["authorization"] == "Bearer o"


def test_no_trace_no_request_id_no_token_sends_none(server: ScriptedServer, sleeps: Sleeps) -> None:
    # In a context of its own: no trace and no request id, whatever an earlier test of the same process
    # left in the current one (a Flask request context not popped leaves its request id set).
    contextvars.Context().run(client_for(server.url, sleeps, token_source=None).get, "/api/x")
    sent = server.seen[0].headers
    assert not {"traceparent", "tracestate", "x-request-id", "authorization"} & set(sent)


@pytest.mark.parametrize("path", ["api/x", "//evil.example.com/x", "http://evil.example.com/x"])
def test_paths_must_be_relative_to_the_base_url(sleeps: Sleeps, path: str) -> None:
    with pytest.raises(ValueError):
        client_for("http://127.0.0.1:1", sleeps).get(path)


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError):
        ApiClient("ftp://host", token_source=None)


# -- token sources -------------------------------------------------------------------------------


def test_static_token_source_returns_its_token() -> None:
    assert static_token("abc")() == "abc"
    with pytest.raises(ValueError):
        static_token("")
