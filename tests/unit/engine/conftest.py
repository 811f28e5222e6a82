"""Helpers for engine tests: scripted tools, a fake clock, and a one-call runner over a playbook mapping."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from noetl_cloud.engine import Engine, ExecutionResult, FakeClock, MemoryPayloadStore, MemorySink, Outcome, ToolCall
from noetl_cloud.spec import PlaybookDoc, validate_document
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.registry import ToolRegistry, default_registry

#: The test services these suites call listen on loopback, which http tasks may not reach by default:
#: the tests allow it explicitly, as an operator allows an internal service (NOETL_HTTP_TOOL_ALLOW).
LOOPBACK_ALLOW = ("127.0.0.1",)


def loopback_tools() -> ToolRegistry:
    """The built-in tools, with http tasks allowed to reach loopback."""
    return default_registry(http_allow=LOOPBACK_ALLOW)


class EchoTool:
    """``kind: echo``: ok with the rendered ``value`` (or error when ``fail`` is true); records each call."""

    kind = "echo"
    raw_fields: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def run(self, call: ToolCall) -> Outcome:
        self.calls.append(call)
        if call.config.get("fail"):
            return Outcome.fail("boom", str(call.config.get("message", "asked to fail")), http={"status": 503})
        return Outcome.ok(call.config.get("value"))


class ScriptTool:
    """``kind: script``: returns the next outcome scripted for the task label, then repeats the last one."""

    kind = "script"
    raw_fields: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.scripts: dict[str, list[Outcome]] = {}
        self.calls: list[ToolCall] = []

    def run(self, call: ToolCall) -> Outcome:
        self.calls.append(call)
        script = self.scripts[call.task]
        return script.pop(0) if len(script) > 1 else script[0]


@dataclass
class Harness:
    sink: MemorySink = field(default_factory=MemorySink)
    clock: FakeClock = field(default_factory=FakeClock)
    echo: EchoTool = field(default_factory=EchoTool)
    script: ScriptTool = field(default_factory=ScriptTool)
    payloads: MemoryPayloadStore = field(default_factory=MemoryPayloadStore)
    threshold: int = 256 * 1024

    def engine(self, run_child: Callable[[str, dict[str, Any]], Outcome] | None = None) -> Engine:
        tools = ToolRegistry([NoopTool(), self.echo, self.script])
        return Engine(
            tools=tools,
            sink=self.sink,
            clock=self.clock,
            payloads=self.payloads,
            threshold=self.threshold,
            run_child=run_child,
        )

    def run(self, *steps: dict[str, Any], workload: dict[str, Any] | None = None, **root: Any) -> ExecutionResult:
        return self.engine().run(playbook(*steps, **root), workload)

    def types(self) -> list[str]:
        return self.sink.types()

    def payloads_of(self, event_type: str) -> list[dict[str, Any]]:
        return [event.payload for event in self.sink.events if event.event_type == event_type]


def playbook(*steps: dict[str, Any], **root: Any) -> PlaybookDoc:
    doc = validate_document(
        {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "t"}, "workflow": list(steps), **root}
    )
    assert isinstance(doc, PlaybookDoc)
    return doc


@pytest.fixture
def harness() -> Harness:
    return Harness()


# -- a local HTTP API: /x echoes, /fail is 503, /text is text/plain, /items pages 5 numbers ----------------


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/fail":
            self._send(503, {"error": "busy"})
        elif url.path == "/text":
            self._send(200, "plain", content_type="text/plain")
        elif url.path == "/items":
            page, size, total = int(query.get("page", 1)), int(query.get("pageSize", 2)), 5
            data = list(range((page - 1) * size, min(page * size, total)))
            self._send(200, {"data": data, "paging": {"page": page, "hasMore": page * size < total}})
        else:
            self._send(200, {"path": url.path, "query": query, "auth": self.headers.get("Authorization")})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self._send(201, {"received": json.loads(self.rfile.read(length))})

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        raw = (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
