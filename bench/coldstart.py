"""Cold start of every role: process start to its first successful answer, and what it imported.

Each role in ``functions/<role>/main.py`` starts the way its image runs it (gunicorn, one worker) with
``PYTHONPROFILEIMPORTTIME=1``; the clock runs from ``Popen`` to the first ``200`` of ``GET /healthz``,
which builds the role's app (every entry point builds it lazily, on the first request). The import log
of that process gives the number of modules it imported, their cumulative import time, and whether it
pulled in the heavy packages a role should only load when it uses them.

Baseline, same run: a bare gunicorn + Flask app answering ``/healthz``.

    make up && .venv/bin/python bench/coldstart.py [--runs 3]

Goals (#12): ingress under 0.6 s, every other role under 1.5 s. Prints; never fails on timing.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import urllib3

from noetl_cloud.local.process import gunicorn_argv, stop_group
from noetl_cloud.local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sqlalchemy", "pg8000", "pyarrow", "google.cloud.pubsub_v1", "google.cloud.firestore", "google.cloud.storage")
GOALS = {"ingress": 0.6}
DEFAULT_GOAL = 1.5
BARE = 'from flask import Flask\napp = Flask("bare")\n\n@app.get("/healthz")\ndef healthz():\n    return "ok"\n'
_IMPORT = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def first_answer(source: Path, env: dict[str, str], log: Path) -> float:
    """Seconds from process start to the first 200 of /healthz."""
    port = free_port()
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=0.2, read=10))
    with log.open("wb") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen(
            gunicorn_argv(source, port=port, workers=1, threads=4),
            env={**os.environ, **env, "PYTHONPROFILEIMPORTTIME": "1"},
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
        try:
            while time.perf_counter() - started < 30:
                try:
                    if http.request("GET", f"http://127.0.0.1:{port}/healthz").status == 200:
                        return time.perf_counter() - started
                except urllib3.exceptions.HTTPError:
                    pass
                time.sleep(0.005)
            raise SystemExit(f"{source.name} did not answer within 30 s; log: {log}")
        finally:
            stop_group(proc.pid)
            proc.wait()


def imports(log: Path) -> tuple[int, float, list[str]]:
    """Modules imported by the serving worker, their top-level cumulative time (s), heavy ones loaded."""
    modules: set[str] = set()
    total_us = 0
    for line in log.read_text(errors="replace").splitlines():
        match = _IMPORT.match(line)
        if not match:
            continue
        name = match.group(4)
        modules.add(name)
        if not match.group(3).strip() and len(match.group(3)) <= 1:
            total_us += int(match.group(2))
    heavy = [h for h in HEAVY if h in modules]
    return len(modules), total_us / 1e6, heavy


def role_env(stack_env: dict[str, str], role: str) -> dict[str, str]:
    token = secrets.token_hex(12)
    return {
        **stack_env,
        "NOETL_ROLE": role,
        "NOETL_PROJECT_ID": "noetl-local",
        "NOETL_INTERNAL_API_TOKEN": token,
        "NOETL_API_URL": "http://127.0.0.1:9",
        "NOETL_WORKER_PUSH_TOKEN": token,
        "NOETL_PROJECTOR_PUSH_TOKEN": token,  # the projector, like the worker, refuses to start without one
        "NOETL_LOG_LEVEL": "WARNING",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3, help="starts per role; the median is printed")
    args = parser.parse_args()
    stack_env = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    roles = sorted(p.parent.name for p in (ROOT / "functions").glob("*/main.py"))
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare"
        bare.mkdir()
        (bare / "main.py").write_text(BARE)
        rows = []
        for name, source, env in [
            ("(bare flask)", bare, {}),
            *[(r, ROOT / "functions" / r, role_env(stack_env, r)) for r in roles],
        ]:
            log = Path(tmp) / f"{name.strip('()').replace(' ', '_')}.log"
            times = [first_answer(source, env, log) for _ in range(args.runs)]
            count, import_s, heavy = imports(log)
            rows.append((name, statistics.median(times), count, import_s, heavy))
    baseline = rows[0][1]
    print(
        f"cold start: process start -> first 200 of /healthz, median of {args.runs} (python {sys.version.split()[0]})"
    )
    print(
        f"{'role':<22} {'seconds':>8} {'÷ bare':>7} {'goal':>6}  {'modules':>7} {'import s':>8}  heavy packages loaded"
    )
    for name, seconds, count, import_s, heavy in rows:
        goal = "" if name.startswith("(") else f"{GOALS.get(name, DEFAULT_GOAL):.1f}"
        met = "" if not goal else (" ok" if seconds < float(goal) else " MISSED")
        print(
            f"{name:<22} {seconds:8.3f} {seconds / baseline:7.2f} {goal:>6}{met:<7} {count:7d} {import_s:8.3f}  "
            + (", ".join(heavy) or "-")
        )


if __name__ == "__main__":
    main()
