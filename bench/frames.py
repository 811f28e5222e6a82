"""Frames: a scaled PFT-like workload run as a cursor loop in row mode and in frame mode, and the frame
claim path against raw ``SKIP LOCKED`` claims. Prints figures and ratios; never fails on timing.

Workload: 2 facilities x 300 patients x 5 data types = 3,000 queue rows. Each (facility, patient, type) is
a paginated resource of the fixture API (2-4 pages of 5 items, by a hash of the key) served by
``--fixtures`` processes, each limiting itself to 50 requests/s (429 above). The cursor loop's pipeline
fetches every page (a ``python`` task; in frame mode one batched request per page round for the whole
frame) and saves the items to PostgreSQL with the ``postgres`` tool. It runs once with
``process: row, max_rows: 1`` and once with ``process: frame, max_rows: 50``, 8 slots each.

The execute and frames roles run under gunicorn (their deployables' command lines) on a fresh database;
the workers are ``--workers`` threads in this process, each a real ``WorkerService`` calling both roles
over HTTP. They take command notifications from the command table rather than from the Pub/Sub
emulator (whose push delivers at most two messages at a time per subscription, which would cap both
modes at two slots).

Claim path, same run: ``--claimers`` threads claim and commit frames through the frames API for
``--seconds``, once one frame per request (a claim, then a commit), then with 20 and with
``--frames-per-request`` (default 50) frames per request (a claim of that many, then batch commits that
each lease the next ones); each line gives frames/s, requests/s and the fraction of the baseline. The
baseline is pgbench running ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)`` on a
queue with a partial index on its claimable rows, with as many clients. ``claim ratio`` is the
``--frames-per-request`` line's.

    make up && .venv/bin/python bench/frames.py [--patients 300] [--fixtures 8] [--workers 8]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pg8000.dbapi
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import execute  # bench/execute.py: a fresh, migrated database
from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.components import PROJECT_ID, StackError
from noetl_cloud.local.postgres import pg_bindir
from noetl_cloud.local.process import gunicorn_argv, http_ok, stop_group, wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.messaging.pubsub import PubSubPublisher
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
from noetl_cloud.settings import Settings
from noetl_cloud.tools.registry import default_registry
from noetl_cloud.web.client import ApiClient, static_token
from noetl_cloud.worker.service import WorkerService

ROOT = Path(__file__).resolve().parent.parent
DB = "bench_frames"
TOKEN = secrets.token_hex(16)
TYPES = ("demographics", "vitals", "labs", "medications", "encounters")
ITEMS_PER_PAGE = 5
RATE_PER_PROCESS = 50.0
SLOTS = 8


def pages(facility: int, patient: int, kind: str) -> int:
    digest = hashlib.sha256(f"{facility}/{patient}/{kind}".encode()).digest()
    return 2 + digest[0] % 3


# -- the fixture API ------------------------------------------------------------------------------


def _fixture(port: int, ready: Any) -> None:
    lock = threading.Lock()
    bucket = {"tokens": RATE_PER_PROCESS, "at": time.monotonic()}

    def admit() -> bool:
        with lock:
            now = time.monotonic()
            bucket["tokens"] = min(RATE_PER_PROCESS, bucket["tokens"] + (now - bucket["at"]) * RATE_PER_PROCESS)
            bucket["at"] = now
            if bucket["tokens"] >= 1:
                bucket["tokens"] -= 1
                return True
            return False

    def page(req: dict[str, Any]) -> dict[str, Any]:
        f, p, k, n = int(req["facility"]), int(req["patient"]), str(req["type"]), int(req["page"])
        total = pages(f, p, k)
        items = [{"item": i, "value": f"{k}-{f}-{p}-{n}-{i}"} for i in range(ITEMS_PER_PAGE)] if n <= total else []
        return {**req, "items": items, "next_page": n + 1 if n < total else None}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # /page {facility, patient, type, page} or /batch {requests: [...]}
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not admit():
                self._answer(429, {"error": "rate limited"})
            elif self.path == "/batch":
                self._answer(200, {"results": [page(r) for r in body["requests"]]})
            else:
                self._answer(200, page(body))

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ready.set()
    server.serve_forever()


@contextmanager
def fixtures(count: int) -> Iterator[list[str]]:
    ctx = multiprocessing.get_context("spawn")
    procs, urls = [], []
    for _ in range(count):
        port = _free_port()
        ready = ctx.Event()
        proc = ctx.Process(target=_fixture, args=(port, ready), daemon=True)
        proc.start()
        ready.wait(10)
        procs.append(proc)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.join()


# -- the playbook ---------------------------------------------------------------------------------

FETCH = """\
def main(rows, fixtures, batch):
    import json, time, urllib.request
    def post(url, body):
        while True:
            request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                if exc.code != 429:
                    raise
                time.sleep(0.02)
    wanted = [{"facility": r["facility"], "patient": r["patient"], "type": r["data_type"], "page": 1} for r in rows]
    saved = []
    while wanted:
        base = fixtures[hash(json.dumps(wanted[0], sort_keys=True)) % len(fixtures)]
        if batch:
            results = post(base + "/batch", {"requests": wanted})["results"]
        else:
            results = [post(base + "/page", w) for w in wanted]
        wanted = []
        for res in results:
            for item in res["items"]:
                saved.append({"facility": res["facility"], "patient": res["patient"], "type": res["type"],
                              "page": res["page"], "item": item["item"], "value": item["value"]})
            if res["next_page"]:
                wanted.append({**{k: res[k] for k in ("facility", "patient", "type")}, "page": res["next_page"]})
    return saved
"""

CLAIM = (
    "UPDATE pft_queue q SET frame_id = CAST(:frame_id AS bigint) "
    "WHERE q.frame_id = CAST(:frame_id AS bigint) OR q.id IN ("
    "SELECT id FROM pft_queue WHERE frame_id IS NULL ORDER BY id "
    "LIMIT greatest({{ __frame_max_rows }} - (SELECT count(*) FROM pft_queue WHERE frame_id = {{ __frame_id }}), 0) "
    "FOR UPDATE SKIP LOCKED) RETURNING q.id, q.facility, q.patient, q.data_type"
)
SAVE = (
    "INSERT INTO pft_result (facility, patient, data_type, page, item, value) "
    "SELECT (r->>'facility')::int, (r->>'patient')::int, r->>'type', (r->>'page')::int, (r->>'item')::int, "
    "r->>'value' FROM jsonb_array_elements(CAST(:records AS jsonb)) r"
)


def playbook(mode: str, max_rows: int, fixture_urls: list[str]) -> str:
    rows = "{{ frame.rows }}" if mode == "frame" else "{{ [iter.row] }}"
    document = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": f"pft_{mode}", "path": f"bench/pft_{mode}"},
        "workload": {"fixtures": fixture_urls},
        "workflow": [
            {"step": "start", "tool": {"kind": "noop"}, "next": [{"step": "fetch"}]},
            {
                "step": "fetch",
                "loop": {
                    "iterator": "row",
                    "cursor": {
                        "kind": "postgres",
                        "auth": "pg",
                        "claim": CLAIM,
                        "params": {"frame_id": "{{ __frame_id }}"},
                    },
                    "spec": {
                        "mode": "cursor",
                        "max_in_flight": SLOTS,
                        "frame": {"max_rows": max_rows, "process": mode, "lease_seconds": 120, "heartbeat_seconds": 30},
                    },
                },
                "tool": [
                    {
                        "fetch": {
                            "kind": "python",
                            "args": {"rows": rows, "fixtures": "{{ workload.fixtures }}", "batch": mode == "frame"},
                            "code": FETCH,
                        }
                    },
                    {"save": {"kind": "postgres", "auth": "pg", "command": SAVE, "params": {"records": "{{ _prev }}"}}},
                ],
            },
        ],
    }
    return json.dumps(document)


# -- the cluster ----------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def admin(url: str, database: str = "postgres") -> pg8000.dbapi.Connection:
    u = make_url(url)
    conn = pg8000.dbapi.connect(user=u.username, password=u.password, host=u.host, port=u.port, database=database)
    conn.autocommit = True
    return conn


def fresh_database(base_url: str) -> str:
    return execute.fresh_database(base_url, DB)


def start_role(name: str, env: dict[str, str], port: int, workers: int = 2) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        gunicorn_argv(ROOT / "functions" / name, port=port, workers=workers, threads=8),
        env={**os.environ, **env, "NOETL_ROLE": name},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
        stop_group(proc.pid)
        raise RuntimeError(f"{name} did not start")
    return proc


class Workers:
    """``count`` worker threads, each a WorkerService, taking issued commands from the command table."""

    def __init__(self, count: int, url: str, api_port: int, frames_port: int, payload_dir: str) -> None:
        self.engine = create_engine(normalize_url(url), pool_size=count + 2)
        self.stop = threading.Event()
        token = static_token(TOKEN)
        payloads = FilesystemPayloadStore(payload_dir, tenant_id="default", organization_id="default")
        self.services = [
            WorkerService(
                ApiClient(f"http://127.0.0.1:{api_port}", token_source=token, timeout_s=60),
                worker_id=f"bench-worker-{n}",
                tools=default_registry(),
                heartbeat_s=10,
                keychain={"pg": {"dsn": url}},
                frames=ApiClient(f"http://127.0.0.1:{frames_port}", token_source=token, timeout_s=60),
                payloads=payloads,
            )
            for n in range(count)
        ]
        self.threads = [
            threading.Thread(target=self._run, args=(s, n), daemon=True) for n, s in enumerate(self.services)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, service: WorkerService, n: int) -> None:
        while not self.stop.is_set():
            with self.engine.connect() as conn:
                issued = conn.execute(
                    text("SELECT command_id, execution_id FROM command WHERE status = 'issued' ORDER BY command_id")
                ).all()
            if not issued:
                self.stop.wait(0.02)
                continue
            cid, eid = issued[n % len(issued)]
            service.handle({"command_id": str(cid), "execution_id": str(eid)})

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        self.engine.dispose()


def run_mode(
    api: ApiClient, url: str, mode: str, max_rows: int, fixture_urls: list[str], facilities: int, patients: int
) -> dict[str, Any]:
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS pft_queue, pft_result"))
        conn.execute(
            text(
                "CREATE TABLE pft_queue (id serial PRIMARY KEY, facility int, patient int, data_type text, "
                "frame_id bigint)"
            )
        )
        conn.execute(text("CREATE INDEX ON pft_queue (id) WHERE frame_id IS NULL"))
        conn.execute(text("CREATE INDEX ON pft_queue (frame_id)"))
        conn.execute(
            text("CREATE TABLE pft_result (facility int, patient int, data_type text, page int, item int, value text)")
        )
        conn.execute(
            text(
                "INSERT INTO pft_queue (facility, patient, data_type) SELECT f, p, t FROM generate_series(1, :f) f, "
                "generate_series(1, :p) p, unnest(CAST(:types AS text[])) t ORDER BY p, f, t"
            ),
            {"f": facilities, "p": patients, "types": list(TYPES)},
        )
    api.post("/api/catalog", json={"content": playbook(mode, max_rows, fixture_urls)}).raise_for_error()
    started = time.monotonic()
    eid = api.post("/api/execute", json={"path": f"bench/pft_{mode}"}).raise_for_error().json["execution_id"]
    assert wait_until(
        lambda: api.get(f"/api/executions/{eid}").json["status"] in ("completed", "failed"), timeout=1800, interval=0.1
    )
    wall = time.monotonic() - started
    detail = api.get(f"/api/executions/{eid}").json
    with engine.connect() as conn:
        counts = dict(
            conn.execute(
                text(
                    "SELECT split_part(event_type, '.', 1), count(*) FROM event WHERE execution_id = :e "
                    "AND (event_type LIKE 'command.%' OR event_type LIKE 'frame.%') GROUP BY 1"
                ),
                {"e": int(eid)},
            ).all()
        )
        saved = conn.execute(text("SELECT count(*) FROM pft_result")).scalar_one()
        frames = conn.execute(
            text("SELECT count(*), coalesce(avg(NULLIF(row_count, 0)), 0) FROM frame WHERE execution_id = :e"),
            {"e": int(eid)},
        ).one()
    engine.dispose()
    slots = (detail.get("results") or {}).get("fetch") or []
    return {
        "status": detail["status"],
        "wall": wall,
        "command_events": int(counts.get("command", 0)),
        "frame_events": int(counts.get("frame", 0)),
        "claims": sum(int(s.get("claims", 0)) for s in slots if isinstance(s, dict)),
        "frames": int(frames[0]),
        "rows_per_frame": float(frames[1]),
        "saved": int(saved),
    }


# -- the claim path -------------------------------------------------------------------------------


def frame_cycles(frames_port: int, url: str, claimers: int, seconds: float, per_request: int) -> tuple[float, float]:
    """Frames claimed and committed per second through the HTTP API by ``claimers`` threads, and the
    HTTP requests per second that took.

    ``per_request == 1``: the one-frame loop, a claim and then a commit of its frame (two requests a
    frame). Above 1: each thread claims ``per_request`` frames, then in a loop commits them all in one
    batch commit that also leases its next ``per_request`` frames (spec §5.3: a commit may hand the
    worker its next frames), one request per ``per_request`` frames.
    """
    from noetl_cloud.frames.app import FramesPlane
    from noetl_cloud.frames.policy import FramePolicy
    from noetl_cloud.messaging.memory import InMemoryPublisher

    plane = FramesPlane(Settings(database_url=url), publisher_override=InMemoryPublisher())
    with plane.engine.begin() as conn:
        eid = plane.ids.next_id()
        conn.execute(
            text(
                "INSERT INTO execution (execution_id, tenant_id, organization_id, path, status, execution_pool) "
                "VALUES (:e, 'default', 'default', 'bench/claims', 'started', 'shared')"
            ),
            {"e": eid},
        )
    stage = plane.service.open_stage(eid, "claims", FramePolicy())["stage_id"]
    plane.engine.dispose()
    done = [0] * claimers
    calls = [0] * claimers
    deadline = time.monotonic() + seconds

    def one_by_one(client: ApiClient, worker: str, n: int) -> None:
        while time.monotonic() < deadline:
            got = client.post(f"/api/stages/{stage}/frames/claim", json={"worker_id": worker}).json["frames"]
            for frame in got:
                client.post(
                    f"/api/frames/{frame['frame_id']}/commit",
                    json={"worker_id": worker, "status": "COMPLETED", "row_count": 1},
                )
                done[n] += 1
            calls[n] += 1 + len(got)

    def batched(client: ApiClient, worker: str, n: int) -> None:
        claim = {"requested_count": per_request}
        got = client.post(f"/api/stages/{stage}/frames/claim", json={"worker_id": worker, **claim}).json["frames"]
        calls[n] += 1
        while got:
            commits = [{"frame_id": f["frame_id"], "status": "COMPLETED", "row_count": 1} for f in got]
            body: dict[str, Any] = {"worker_id": worker, "commits": commits}
            if time.monotonic() < deadline:
                body["claim"] = claim
            answer = client.post(f"/api/stages/{stage}/frames/commit", json=body).json
            assert answer["committed"] == len(commits), answer
            done[n] += answer["committed"]
            calls[n] += 1
            got = answer.get("frames", [])

    def cycle(n: int) -> None:
        client = ApiClient(f"http://127.0.0.1:{frames_port}", token_source=static_token(TOKEN), timeout_s=30)
        (one_by_one if per_request == 1 else batched)(client, f"claimer-{n}", n)

    threads = [threading.Thread(target=cycle, args=(n,)) for n in range(claimers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return sum(done) / elapsed, sum(calls) / elapsed


def pgbench_binary() -> str:
    """pgbench of the PostgreSQL binaries the local stack runs (``NOETL_LOCAL_PG_BINDIR``, else the
    ``initdb`` it finds), else the one on ``PATH``."""
    try:
        beside = pg_bindir() / "pgbench"
    except StackError:
        beside = None
    if beside is not None and beside.exists():
        return str(beside)
    found = shutil.which("pgbench")
    if found is None:
        raise SystemExit("pgbench was not found beside the stack's PostgreSQL binaries nor on PATH")
    return found


def pgbench_claims(url: str, clients: int, seconds: int) -> float:
    u = make_url(url)
    conn = admin(url, DB)
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS bench_queue")
    cur.execute("CREATE TABLE bench_queue (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'pending')")
    cur.execute("CREATE INDEX ON bench_queue (id) WHERE status = 'pending'")
    cur.execute("INSERT INTO bench_queue (status) SELECT 'pending' FROM generate_series(1, 2000000)")
    cur.execute("VACUUM ANALYZE bench_queue")
    conn.close()
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(
            "UPDATE bench_queue SET status = 'claimed' WHERE id = "
            "(SELECT id FROM bench_queue WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);\n"
        )
    binary = pgbench_binary()
    out = subprocess.run(
        [
            binary,
            "-n",
            "-c",
            str(clients),
            "-j",
            str(min(clients, 4)),
            "-T",
            str(seconds),
            "-f",
            script.name,
            "-h",
            str(u.host),
            "-p",
            str(u.port),
            "-U",
            str(u.username),
            DB,
        ],
        env={**os.environ, "PGPASSWORD": str(u.password)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script.name)
    match = re.search(r"tps = ([0-9.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facilities", type=int, default=2)
    parser.add_argument("--patients", type=int, default=300)
    parser.add_argument("--fixtures", type=int, default=8, help="fixture processes, 50 req/s each")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--claimers", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--frames-processes", type=int, default=max(2, os.cpu_count() or 2), help="gunicorn workers")
    parser.add_argument("--claims-only", action="store_true", help="skip the workload, measure the claim path")
    parser.add_argument(
        "--frames-per-request",
        type=int,
        default=50,
        help="frames a claim leases and a batch commit ends, for the claim ratio (1 and 20 are measured too)",
    )
    args = parser.parse_args()

    env = LocalStack.from_env(os.environ).env()
    url = fresh_database(env["NOETL_DATABASE_URL"])
    api_port, frames_port = _free_port(), _free_port()
    bench_id = f"bench{secrets.token_hex(3)}"
    PubSubPublisher(PROJECT_ID, emulator_host=env["PUBSUB_EMULATOR_HOST"]).ensure_topics([f"{bench_id}-events"])
    role_env = {
        **env,
        "NOETL_DATABASE_URL": url,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_DB_POOL_SIZE": "10",
        "NOETL_COMMAND_TOPIC_PREFIX": f"{bench_id}-commands-",
        # Events to a topic of the bench's own with no subscriber: not pushed to the stack's projector.
        "NOETL_EVENTS_TOPIC": f"{bench_id}-events",
    }
    execute = start_role("execute", role_env, api_port)
    frames_role = start_role("frames", role_env, frames_port, args.frames_processes)
    api = ApiClient(f"http://127.0.0.1:{api_port}", token_source=static_token(TOKEN), timeout_s=60)
    workers = Workers(args.workers, url, api_port, frames_port, tempfile.mkdtemp(prefix="bench-frames-"))
    total = (
        sum(pages(f, p, t) for f in range(1, args.facilities + 1) for p in range(1, args.patients + 1) for t in TYPES)
        * ITEMS_PER_PAGE
    )
    results = {}
    try:
        with fixtures(0 if args.claims_only else args.fixtures) as urls:
            print(
                f"workload: {args.facilities} facilities x {args.patients} patients x {len(TYPES)} types = "
                f"{args.facilities * args.patients * len(TYPES)} queue rows; fixture total {total} items; "
                f"{args.fixtures} fixture processes at {RATE_PER_PROCESS:.0f} req/s; {args.workers} worker threads; "
                f"{SLOTS} slots"
            )
            for mode, max_rows in () if args.claims_only else (("row", 1), ("frame", 50)):
                r = run_mode(api, url, mode, max_rows, urls, args.facilities, args.patients)
                results[mode] = r
                print(
                    f"process: {mode}, max_rows: {max_rows}: status {r['status']}, wall {r['wall']:.2f} s, "
                    f"command.* {r['command_events']} + frame.* {r['frame_events']} = "
                    f"{r['command_events'] + r['frame_events']} events, claim requests {r['claims']}, "
                    f"frames {r['frames']} ({r['rows_per_frame']:.2f} rows/frame), "
                    f"rows saved {r['saved']} (fixture {total}: {'equal' if r['saved'] == total else 'DIFFERENT'})"
                )
        if results:
            row, frame = results["row"], results["frame"]
            events = (row["command_events"] + row["frame_events"]) / max(
                frame["command_events"] + frame["frame_events"], 1
            )
            print(f"events ratio: {events:.2f} (target >= 10)")
            print(f"wall ratio: {row['wall'] / frame['wall']:.2f} (target >= 2)")
            print(f"claim requests ratio: {row['claims'] / max(frame['claims'], 1):.2f}")
        workers.close()  # idle workers poll the command table: not while the claim path is measured
        sizes = sorted({1, 20, args.frames_per_request})
        rates = {k: frame_cycles(frames_port, url, args.claimers, args.seconds, k) for k in sizes}
        raw = pgbench_claims(url, args.claimers, args.seconds)
        for k, (cycles, calls) in rates.items():
            shape = (
                "one frame per request (a claim, then a commit)"
                if k == 1
                else f"{k} frames per claim and per batch commit, the commit leasing the next"
            )
            print(
                f"frame claim+commit cycles/s through the HTTP API, {shape} ({args.claimers} threads): "
                f"{cycles:.1f} ({calls:.0f} requests/s; {cycles / raw:.3f} of pgbench)"
            )
        print(f"raw SKIP LOCKED LIMIT 1 claims/s ({pgbench_binary()}, {args.claimers} clients): {raw:.1f}")
        cycles = rates[args.frames_per_request][0]
        print(
            f"claim ratio: {cycles / raw:.3f} (goal >= 0.15; {args.frames_per_request} frames per request; "
            f"one frame per request: {rates[1][0] / raw:.3f})"
        )
    finally:
        workers.close()
        api.close()
        for proc in (execute, frames_role):
            stop_group(proc.pid)
            proc.wait()


if __name__ == "__main__":
    main()
