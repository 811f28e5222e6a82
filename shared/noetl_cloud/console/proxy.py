"""``noetl-cloud console``: the console in an ordinary browser, through a loopback proxy that adds credentials.

A browser cannot put the stack's bearer token on the requests it makes for a page, so this proxy
listens on ``127.0.0.1`` and forwards the console's requests (``GET`` of ``/console/...`` and
``/api/...``) to the control plane with the ``Authorization`` header of the operator's token source
(the same as ``noetl-cloud execute`` uses). It serves only a ``Host`` that names the loopback address it
listens on (a web page cannot use it through DNS rebinding), and forwards a ``POST`` (the console's
subscription actions) only with a JSON body and an ``Origin`` of its own: another site's page cannot make
the operator's browser act through it.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import urllib3

from noetl_cloud.web.client import TokenSource

log = logging.getLogger(__name__)

#: Response headers passed back to the browser (the console's own security headers among them).
FORWARDED_HEADERS = (
    "Content-Type",
    "Cache-Control",
    "Content-Security-Policy",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Location",
    "X-Request-Id",
)
#: The largest body a POST may carry (the console's actions are a few bytes of JSON).
MAX_BODY = 64 * 1024
#: The long poll of the events holds a request up to 25 s: the upstream read timeout outlasts it.
READ_TIMEOUT_S = 40.0


class ConsoleProxy:
    """A loopback HTTP server forwarding the console's reads to ``api_url`` with credentials."""

    def __init__(self, api_url: str, token: TokenSource, *, port: int = 0, host: str = "127.0.0.1") -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._http = urllib3.PoolManager(
            maxsize=8, timeout=urllib3.Timeout(connect=5.0, read=READ_TIMEOUT_S), retries=False
        )
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the one the OS gave when started with ``port=0``)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Where an operator's browser opens the console."""
        return f"http://127.0.0.1:{self.port}/console/"

    def allowed_hosts(self) -> frozenset[str]:
        """The ``Host`` headers a request may carry: the loopback names of this port."""
        return frozenset(f"{name}:{self.port}" for name in ("127.0.0.1", "localhost"))

    def forward(self, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """``method path`` on the control plane with credentials; its status, headers and body."""
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "*/*"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        answer = self._http.request(method, self.api_url + path, body=body, headers=headers, redirect=False)
        headers = {name: answer.headers[name] for name in FORWARDED_HEADERS if name in answer.headers}
        return answer.status, headers, answer.data

    def serve_forever(self) -> None:
        """Serve until :meth:`close` (or Ctrl-C)."""
        self._server.serve_forever()

    def start(self) -> ConsoleProxy:
        """Serve in a daemon thread (tests)."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="console-proxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the upstream connections."""
        self._server.shutdown()
        self._server.server_close()
        self._http.clear()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "noetl-console-proxy"

            def do_GET(self) -> None:
                if self.headers.get("Host", "") not in proxy.allowed_hosts():
                    self._answer(403, b"this proxy serves its loopback address only\n")
                    return
                if not (self.path == "/console" or self.path.startswith(("/console/", "/api/"))):
                    self._answer(404, b"the proxy forwards /console/ and /api/ only\n")
                    return
                self._forward("GET", None)

            def do_POST(self) -> None:
                origins = {f"http://{host}" for host in proxy.allowed_hosts()}
                if (
                    self.headers.get("Host", "") not in proxy.allowed_hosts()
                    or self.headers.get("Origin") not in origins
                ):
                    self._answer(403, b"a POST must come from the console this proxy serves\n")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if not self.path.startswith("/api/") or self.headers.get_content_type() != "application/json":
                    self._answer(415, b"the proxy forwards JSON POSTs to /api/ only\n")
                    return
                if length > MAX_BODY:
                    self._answer(413, b"body too large\n")
                    return
                self._forward("POST", self.rfile.read(length))

            def _forward(self, method: str, body: bytes | None) -> None:
                try:
                    status, headers, answer = proxy.forward(self.path, method, body)
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    log.warning("console proxy: the control plane did not answer (%s)", type(exc).__name__)
                    self._answer(502, b"the control plane did not answer\n")
                    return
                self._answer(status, answer, headers)

            def _refuse(self) -> None:
                self._answer(405, b"the console proxy forwards GET and POST only\n", {"Allow": "GET, POST"})

            do_PUT = do_PATCH = do_DELETE = _refuse

            def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {"Content-Type": "text/plain; charset=utf-8"}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("console proxy: " + format, *args)

        return Handler
