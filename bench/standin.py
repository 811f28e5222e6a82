"""The ingress benchmark's stand-in control plane: answers at once, on as little CPU as an HTTP server can.

Figure (b) of ``bench/ingress.py`` measures what the ingress role costs, so its control plane must cost
next to nothing on the same cores. A Flask app under gunicorn spent about as much CPU per forwarded
request as the ingress itself spent serving it (0.6 ms against 1.0 ms), which measured two web apps,
not one. This is one asyncio process speaking enough HTTP/1.1 for the ingress's keep-alive client:
a request line, headers, a ``Content-Length`` body, keep-alive unless the client says ``close``.

    python bench/standin.py --port 15502

Routes: ``GET /api/internal/ingress/<listener>`` (the listener's configuration),
``POST /api/execute`` (202), ``POST /api/internal/ingress/<listener>/audit`` (201),
``GET /healthz``; anything else is 404.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from ingress_targets import CONFIG


def _answer(status: int, reason: str, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


ACCEPTED = _answer(202, "Accepted", {"execution_id": "1", "status": "started", "execution_pool": "shared"})
AUDITED = _answer(201, "Created", {"event_id": "1"})
CONFIGURED = _answer(200, "OK", CONFIG)
HEALTHY = _answer(200, "OK", {"status": "ok"})
MISSING = _answer(404, "Not Found", {"error": {"code": "not_found", "message": "no such route"}})


def route(method: str, target: str) -> bytes:
    if method == "POST" and target == "/api/execute":
        return ACCEPTED
    if method == "GET" and target.startswith("/api/internal/ingress/"):
        return CONFIGURED
    if method == "POST" and target.startswith("/api/internal/ingress/") and target.endswith("/audit"):
        return AUDITED
    if method == "GET" and target == "/healthz":
        return HEALTHY
    return MISSING


class StandIn(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(route(method, target))
            if headers.get("connection", "").lower() == "close":
                self.transport.close()
                return


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(StandIn, "127.0.0.1", port, backlog=256)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("BENCH_SECRET", "bench-secret")
    asyncio.run(serve(args.port))
