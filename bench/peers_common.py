"""What both sides of ``bench/peers.py`` share: process groups, databases, the HTTP client, CPU meters.

* ``Processes``: every process group the run starts, each logging to its own file; ``stop_all`` in
  a ``finally`` stops whatever is left.
* ``create_database``: a fresh database on the local stack's PostgreSQL.
* ``Client`` and ``drive``: urllib3's keep-alive connection pool to one loopback port, driven by
  ``clients`` threads for a time window.
* ``Meter``: CPU seconds (utime + stime from ``/proc``) of process groups by category, and of the
  PostgreSQL backends of one database (``PgBackends``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pg8000.dbapi
import urllib3
from sqlalchemy.engine import make_url

from noetl_cloud.local.process import group_stats, http_ok, port_open, stop_group, wait_until

HOST = "127.0.0.1"  # every request of the benchmark goes to loopback
TICK = os.sysconf("SC_CLK_TCK")
WARMUP_SECONDS = 1.5
SETTLE_SECONDS = 0.3  # after a window, before the last CPU reading: work the last answers left behind


# -- processes ---------------------------------------------------------------------------------


class Processes:
    """The process groups this run started (each in its own session), by name."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: dict[int, tuple[str, subprocess.Popen[bytes] | None]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> int:
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running[proc.pid] = (name, proc)
        return proc.pid

    def adopt(self, name: str, pgid: int) -> int:
        """A process group started elsewhere (``spawn``), stopped with the others."""
        self.running[pgid] = (name, None)
        return pgid

    def stop(self, pgid: int) -> None:
        name_proc = self.running.pop(pgid, None)
        stop_group(pgid)
        if name_proc and name_proc[1]:
            name_proc[1].wait(timeout=5)

    def stop_all(self) -> None:
        for pgid in list(self.running):
            self.stop(pgid)

    @contextmanager
    def serving(self, name: str, argv: list[str], env: dict[str, str], port: int) -> Iterator[int]:
        """A server on ``port``, up once its ``/healthz`` answers; its process group."""
        if port_open(port):
            raise SystemExit(f"port {port} is taken: {name} cannot start")
        pgid = self.start(name, argv, env)
        try:
            if not wait_until(lambda: http_ok(f"http://{HOST}:{port}/healthz"), timeout=60):
                raise SystemExit(f"{name} did not start; see {self.log_dir / (name + '.log')}")
            yield pgid
        finally:
            self.stop(pgid)

    def problems(self, limit: int = 3) -> dict[str, tuple[int, list[str]]]:
        """Per log: the number of warning and error lines (WARNING, ERROR, CRITICAL, tracebacks) and the
        first few distinct ones (the roles run at NOETL_LOG_LEVEL=WARNING: whatever they log is notable)."""
        found = {}
        for log in sorted(self.log_dir.glob("*.log")):
            lines = [
                line.strip()
                for line in log.read_text(errors="replace").splitlines()
                if any(word in line for word in ("Traceback", "WARNING", "ERROR", "CRITICAL"))
            ]
            if lines:
                found[log.stem] = (len(lines), list(dict.fromkeys(lines))[:limit])
        return found


# -- databases ---------------------------------------------------------------------------------


def connect(url: str, database: str | None = None) -> pg8000.dbapi.Connection:
    u = make_url(url)
    conn = pg8000.dbapi.connect(
        user=u.username, password=u.password, host=u.host, port=u.port, database=database or u.database
    )
    conn.autocommit = True
    return conn


def create_database(base_url: str, name: str) -> str:
    """Drop and create ``name``; its URL (the base URL with the database replaced)."""
    conn = connect(base_url, "postgres")
    try:
        conn.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.cursor().execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


def drop_database(base_url: str, name: str) -> None:
    conn = connect(base_url, "postgres")
    try:
        conn.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


def scalar(conn: pg8000.dbapi.Connection, sql: str, *params: object) -> Any:
    cursor = conn.cursor()
    cursor.execute(sql, params)
    return cursor.fetchone()[0]


def column(conn: pg8000.dbapi.Connection, sql: str, *params: object) -> list[float]:
    cursor = conn.cursor()
    cursor.execute(sql, params)
    return [float(row[0]) for row in cursor.fetchall()]


# -- CPU -----------------------------------------------------------------------------------------


def _pid_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:  # exited meanwhile
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def group_ticks(pgid: int) -> int:
    return sum(int(fields[11]) + int(fields[12]) for fields in group_stats(pgid))


class PgBackends:
    """The PostgreSQL backends one side's work runs in: those connected to its database (client
    backends, autovacuum workers), less the benchmark's own connections (``exclude``). The WAL
    writer, background writer and checkpointer serve every database (and whatever else uses the
    stack's PostgreSQL meanwhile), so they are not counted. A backend that exits inside a window
    takes its CPU with it (the pools of both sides keep theirs)."""

    def __init__(self, base_url: str, database: str) -> None:
        self.conn = connect(base_url, "postgres")
        self.database = database
        self.excluded: set[int] = set()

    def exclude(self, conn: pg8000.dbapi.Connection) -> None:
        self.excluded.add(int(scalar(conn, "SELECT pg_backend_pid()")))

    def ticks(self) -> dict[int, int]:
        cursor = self.conn.cursor()
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,))
        return {pid: _pid_ticks(pid) for (pid,) in cursor.fetchall() if pid not in self.excluded}

    def close(self) -> None:
        self.conn.close()


@dataclass
class Reading:
    groups: dict[str, int]
    backends: dict[int, int]


class Meter:
    """CPU seconds per category since a reading: ``groups`` maps a category to process groups."""

    def __init__(self, groups: dict[str, list[int]], pg: PgBackends) -> None:
        self.groups = groups
        self.pg = pg

    def read(self) -> Reading:
        return Reading({k: sum(group_ticks(g) for g in pgids) for k, pgids in self.groups.items()}, self.pg.ticks())

    def since(self, before: Reading) -> dict[str, float]:
        now = self.read()
        out = {k: (now.groups[k] - before.groups[k]) / TICK for k in self.groups}
        out["postgres"] = sum(t - before.backends.get(pid, 0) for pid, t in now.backends.items()) / TICK
        return out


# -- the HTTP client -----------------------------------------------------------------------------


class Client:
    """The client of both sides: urllib3's keep-alive connection pool to one loopback port."""

    def __init__(self, port: int, size: int = 4) -> None:
        self.pool = urllib3.HTTPConnectionPool(HOST, port, maxsize=size, block=True, retries=False, timeout=60)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> urllib3.BaseHTTPResponse:
        return self.pool.urlopen("POST", path, body=body, headers=headers)

    def close(self) -> None:
        self.pool.close()


def spent_in(cpu: dict[str, float], category: str | None) -> float:
    """CPU seconds of ``category`` (every category when ``None``): ``servers`` sums ``servers:<role>``."""
    return sum(v for k, v in cpu.items() if category is None or k == category or k.startswith(category + ":"))


@dataclass
class Window:
    """One measurement window of one side on one path."""

    items: int = 0
    requests: int = 0
    seconds: float = 0.0
    client_cpu: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    cpu: dict[str, float] = field(default_factory=dict)
    stored: int | None = None  # durable items the database holds after the window, counted there

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0

    def per_item_ms(self, category: str | None = None) -> float:
        return spent_in(self.cpu, category) * 1000 / max(self.items, 1)

    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))


@dataclass
class Chain:
    """One side's chain measurement: ``workflows`` started at once, then some one at a time."""

    workflows: int
    ended: int
    wall: float
    cpu: dict[str, float]
    steps_load: list[float]  # seconds per step, the chains started at once
    steps_alone: list[float]  # seconds per step, the chains started one at a time
    chains_alone: list[float]  # seconds from a chain's start to its last step's end, one at a time
    not_completed: int
    push: list[float] = field(default_factory=list)  # ours: the emulator's push round trip alone, seconds

    @property
    def rate(self) -> float:
        return self.ended / self.wall if self.wall else 0.0

    def per_item_ms(self, category: str | None = None) -> float:
        return spent_in(self.cpu, category) * 1000 / max(self.ended, 1)


Send = Callable[[], tuple[str, int]]  # one request: (status, items it started)
Signer = Callable[[], tuple[bytes, str]]  # the next signed webhook delivery: (a body never sent before, its HMAC)


def drive(send: Send, clients: int, seconds: float) -> Window:
    """``clients`` threads calling ``send`` until ``seconds`` have passed."""
    window = Window()
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def work() -> None:
        begin = time.thread_time()
        items, calls, statuses = 0, 0, Counter[str]()
        while time.perf_counter() < deadline:
            try:
                status, n = send()
            except urllib3.exceptions.HTTPError as exc:
                status, n = type(exc).__name__, 0
                time.sleep(0.01)
            items, calls = items + n, calls + 1
            statuses[status] += 1
        with lock:
            window.items += items
            window.requests += calls
            window.statuses.update(statuses)
            window.client_cpu += time.thread_time() - begin

    threads = [threading.Thread(target=work, daemon=True) for _ in range(clients)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window.seconds = time.perf_counter() - begin
    return window


def measure(send: Send, meter: Meter, seconds: float, stored: Callable[[], int], clients: int = 4) -> Window:
    """A warm-up (not counted), then one window: the CPU each category spent in it, and how many
    durable items the database gained (``stored()`` before and after)."""
    drive(send, clients, WARMUP_SECONDS)
    count = stored()
    before = meter.read()
    window = drive(send, clients, seconds)
    time.sleep(SETTLE_SECONDS)
    window.cpu = meter.since(before)
    window.stored = stored() - count
    return window


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
