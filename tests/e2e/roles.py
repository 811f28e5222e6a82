"""Running roles the way their deployables run: gunicorn serving functions/<role>/main.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from noetl_cloud.local.process import http_ok, stop_group, wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def role(name: str, env: dict[str, str], *, workers: int = 2, threads: int = 4) -> Iterator[str]:
    """Start a role on a free loopback port; its base URL until the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--chdir",
            str(ROOT / "functions" / name),
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--bind",
            f"127.0.0.1:{port}",
            "main:app",
        ],
        env={**os.environ, **env, "NOETL_ROLE": name},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
            raise RuntimeError(f"role {name} did not answer on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(proc.pid)
        proc.wait()
