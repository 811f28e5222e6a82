"""dsl-v2-spec §13 runs as written: every page of a local paginated API, through injected 429 and 503 answers
that the fetch policy retries, ends up in PostgreSQL through ``kind: postgres``; no test sleeps (FakeClock)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from noetl_cloud.engine import FakeClock, MemorySink, ToolCall
from noetl_cloud.engine.local import run_file
from noetl_cloud.tools.egress import EgressPolicy
from noetl_cloud.tools.http import HttpTool
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.postgres import PostgresTool
from noetl_cloud.tools.registry import ToolRegistry
from tests.unit.engine.conftest import LOOPBACK_ALLOW, loopback_tools

PLAYBOOK = Path(__file__).resolve().parents[1] / "data" / "playbooks" / "appendix_13.yaml"
TABLE = (
    "CREATE TABLE appendix_13_rooms (endpoint text NOT NULL, page integer NOT NULL, item_id text NOT NULL, "
    "body jsonb NOT NULL, PRIMARY KEY (endpoint, item_id))"
)
#: Rooms per hotel endpoint (the playbook's workload lists these three paths).
TOTALS = {"/hotels/h1/rooms": 10, "/hotels/h2/rooms": 7, "/hotels/h3/rooms": 0}
#: Answers served before the real page, per (path, page).
INJECTED = {("/hotels/h1/rooms", 2): [429], ("/hotels/h1/rooms", 4): [503], ("/hotels/h2/rooms", 1): [503, 429]}


@dataclass
class RoomsApi:
    """A paginated API: ``GET <path>?page&pageSize`` answers ``{data, paging: {page, hasMore}}``."""

    url: str = ""
    failures: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    requests: list[tuple[str, int, int]] = field(default_factory=list)


@pytest.fixture
def rooms_api() -> Iterator[RoomsApi]:
    api = RoomsApi(failures={key: list(codes) for key, codes in INJECTED.items()})
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            page, size = int(query.get("page", 1)), int(query.get("pageSize", 10))
            if url.path not in TOTALS:
                self._send(404, {"error": "no such endpoint"})
                return
            with lock:
                pending = api.failures.get((url.path, page)) or []
                status = pending.pop(0) if pending else 200
                api.requests.append((url.path, page, status))
            if status != 200:
                self._send(status, {"error": "try later"})
                return
            total, hotel = TOTALS[url.path], url.path.split("/")[2]
            data = [
                {"id": f"{hotel}-r{i}", "hotel": hotel, "room": i}
                for i in range((page - 1) * size, min(page * size, total))
            ]
            self._send(200, {"data": data, "paging": {"page": page, "hasMore": page * size < total}})

        def _send(self, status: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield api
    server.shutdown()
    server.server_close()


@pytest.fixture
def postgres() -> Iterator[PostgresTool]:
    tool = PostgresTool(pool_size=2)
    yield tool
    tool.close()


def _sql(tool: PostgresTool, keychain: dict[str, Any], sql: str) -> Any:
    outcome = tool.run(ToolCall("postgres", {"auth": "pg_k8s", "command": sql}, {}, "setup", "s", "t", 1, keychain))
    assert outcome.status == "ok", outcome.error
    return outcome.result


def test_appendix_13_stores_every_page_through_retries(
    rooms_api: RoomsApi, postgres: PostgresTool, database_url: str
) -> None:
    keychain = {"pg_k8s": {"name": "pg_k8s", "kind": "postgres", "dsn": database_url}}
    _sql(postgres, keychain, TABLE)
    sink, clock = MemorySink(), FakeClock()
    tools = ToolRegistry([NoopTool(), HttpTool(egress=EgressPolicy.from_allowlist(LOOPBACK_ALLOW)), postgres])

    result = run_file(PLAYBOOK, {"api_url": rooms_api.url}, tools=tools, sink=sink, clock=clock, keychain=keychain)

    assert result.status == "completed", result.error
    assert sink.types()[-1] == "playbook.completed"
    items = sum(TOTALS.values())
    stored = _sql(postgres, keychain, "SELECT endpoint, count(*) AS n FROM appendix_13_rooms GROUP BY 1 ORDER BY 1")
    assert {row["endpoint"]: row["n"] for row in stored["rows"]} == {p: n for p, n in TOTALS.items() if n}
    assert sum(row["n"] for row in stored["rows"]) == items
    assert result.results["validate_results"]["rows"] == [{"rows": items, "endpoints": 2}]
    assert "cleanup" not in result.results

    done = [e.payload for e in sink.events if e.event_type == "task.done"]
    fetches = [d for d in done if d["task"] == "fetch_page"]
    retried = [d for d in fetches if d["directive"] == "retry"]
    assert [d["http"]["status"] for d in retried] == [429, 503, 503, 429]
    assert [d["retry_delay"] for d in retried] == [2.0, 2.0, 2.0, 4.0]
    assert clock.sleeps == [2.0, 2.0, 2.0, 4.0]
    assert [d["attempt"] for d in fetches if d["iteration"] == 1] == [1, 2, 3, 1]  # h2: page 1 twice retried
    # 4 + 2 + 1 pages, each fetched once successfully and stored once.
    pages = sum(-(-total // size) or 1 for total, size in zip(TOTALS.values(), (3, 4, 5), strict=True))
    assert len([d for d in fetches if d["directive"] != "retry"]) == pages
    saves = [d for d in done if d["task"] == "save_page"]
    assert len(saves) == pages and {d["pg"]["code"] for d in saves} == {"00000"}
    assert sum(d["result"]["row_count"] for d in saves) == items
    served = [(path, page) for path, page, status in rooms_api.requests if status == 200]
    assert len(served) == pages and len(rooms_api.requests) == pages + 4


def test_appendix_13_routes_a_failed_store_to_cleanup(rooms_api: RoomsApi, database_url: str) -> None:
    """Without the table the first INSERT fails (42P01, not retried): the loop fails and ``cleanup`` runs."""
    keychain = {"pg_k8s": {"kind": "postgres", "dsn": database_url}}
    sink, clock = MemorySink(), FakeClock()
    result = run_file(
        PLAYBOOK, {"api_url": rooms_api.url}, tools=loopback_tools(), sink=sink, clock=clock, keychain=keychain
    )
    assert result.status == "completed", result.error
    assert "cleanup" in result.results and "validate_results" not in result.results
    (failed,) = [e.payload for e in sink.events if e.event_type == "step.failed"]
    assert failed["step"] == "fetch_transform_store" and failed["error"]["sqlstate"] == "42P01"
