"""Client CPU per call of the roles' API client next to the well-kept HTTP clients, in one run.

Issue #24 item 5 asks for an established HTTP client unless the bench shows a cost. Every role calls
another with small JSON requests over keep-alive connections, so the client's CPU per call is what
counts. Measured here, against one local HTTP/1.1 keep-alive server in a separate process (its CPU
is not counted): the product's :class:`~noetl_cloud.web.client.ApiClient` (on ``web/transport.py``),
and the same POST through ``http.client``, urllib3 and requests. Prints the client CPU per call and
each library's cost as a multiple of ours; never fails on timing.

    .venv/bin/python bench/http_client.py [--calls N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time
from collections.abc import Callable

import requests
import urllib3

from noetl_cloud.web.client import ApiClient

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers (40 ms a call, and minutes for the run), which no client can help.
    disable_nagle_algorithm = True

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"accepted":true,"duplicate":false,"next":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
BODY = {"command_id": "384572029983100928", "worker_id": "w1", "attempt": 1, "status": "ok", "result": {"n": 1}}
PATH = "/api/events"


def cpu_per_call_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(50):  # warm: connection open, caches filled
        call()
    start = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        ours = ApiClient(base, token_source=lambda: "t", timeout_s=10.0, retries=0)
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        pool = urllib3.PoolManager()
        session = requests.Session()
        payload = json.dumps(BODY).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer t"}

        def with_http_client() -> object:
            plain.request("POST", PATH, body=payload, headers=headers)
            return json.loads(plain.getresponse().read())

        clients: dict[str, Callable[[], object]] = {
            "ours (web/transport.py)": lambda: ours.post(PATH, BODY).json,
            "http.client": with_http_client,
            "urllib3": lambda: pool.request("POST", base + PATH, body=payload, headers=headers).json(),
            "requests": lambda: session.post(base + PATH, json=BODY, headers={"Authorization": "Bearer t"}).json(),
        }
        figures = {name: cpu_per_call_us(call, args.calls) for name, call in clients.items()}
    finally:
        server.terminate()
        server.wait()
    own = figures["ours (web/transport.py)"]
    print(f"client CPU per keep-alive JSON POST, {args.calls} calls each (the server's CPU not counted)")
    for name, value in figures.items():
        print(f"  {name:<26} {value:7.1f} us   {value / own:4.2f}x ours")
    cheapest = min((v, n) for n, v in figures.items() if not n.startswith("ours"))
    verdict = "keep web/transport.py" if cheapest[0] > own else f"use {cheapest[1]}: it costs no more"
    print(f"between roles: {verdict} (the cheapest library costs {cheapest[0] / own:.2f}x ours per call)")


if __name__ == "__main__":
    main()
