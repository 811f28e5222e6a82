"""The demo's paginated fixture API, served by the demo process on a free loopback port.

``GET /orders?batch=B&page=N&pageSize=K`` answers ``{"data": [orders], "paging": {"page", "pageSize",
"total", "hasMore"}}``. A batch's orders are a pure function of its name (5 to 10 of them), so the
demo knows how many rows each execution must save without asking anyone. Every request is counted.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MIN_ORDERS = 5
MAX_PAGE_SIZE = 100


def orders_of(batch: str) -> list[dict[str, Any]]:
    """The orders of ``batch``: 5 to 10, derived from its name."""
    digest = hashlib.sha256(batch.encode("utf-8")).digest()
    count = MIN_ORDERS + digest[0] % 6
    return [
        {
            "order_id": n + 1,
            "customer": f"customer-{digest[1 + n] % 7}",
            "amount_cents": 100 + int.from_bytes(digest[8 + 2 * n : 10 + 2 * n], "big") % 9900,
        }
        for n in range(count)
    ]


class FixtureApi:
    """A threaded HTTP server on ``127.0.0.1:<port>`` (0: any free port); ``url`` once started, ``pages``
    served per batch."""

    def __init__(self, port: int = 0) -> None:
        self.pages: Counter[str] = Counter()
        self._lock = threading.Lock()
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fixture._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-fixture", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FixtureApi:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FixtureApi:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path != "/orders":
            return _send(handler, 404, {"error": {"code": "not_found", "message": f"no route {parts.path}"}})
        batch = query.get("batch", "")
        try:
            page = int(query.get("page", "1"))
            size = int(query.get("pageSize", "10"))
        except ValueError:
            return _send(
                handler, 400, {"error": {"code": "invalid_paging", "message": "page and pageSize are integers"}}
            )
        if not batch or page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
            message = f"batch is required, page >= 1, 1 <= pageSize <= {MAX_PAGE_SIZE}"
            return _send(handler, 400, {"error": {"code": "invalid_paging", "message": message}})
        orders = orders_of(batch)
        with self._lock:
            self.pages[batch] += 1
        start = (page - 1) * size
        body = {
            "data": orders[start : start + size],
            "paging": {"page": page, "pageSize": size, "total": len(orders), "hasMore": start + size < len(orders)},
        }
        _send(handler, 200, body)


def _send(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode("utf-8")
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
