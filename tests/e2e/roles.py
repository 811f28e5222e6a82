"""Running roles the way their deployables run: gunicorn serving functions/<role>/main.py."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from noetl_cloud.local.process import gunicorn_argv, http_ok, stop_group, wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(name: str, env: dict[str, str], port: int, *, workers: int = 2, threads: int = 4) -> subprocess.Popen[bytes]:
    """Start a role on ``port`` and wait until it answers its health check."""
    logs = os.environ.get("NOETL_TEST_LOG_DIR")  # set it to keep each role's output when debugging
    sink = open(Path(logs) / f"{name}-{port}.log", "ab") if logs else subprocess.DEVNULL
    proc = subprocess.Popen(
        gunicorn_argv(ROOT / "functions" / name, port=port, workers=workers, threads=threads, access_log=bool(logs)),
        env={**os.environ, **env, "NOETL_ROLE": name},
        stdout=sink,
        stderr=sink,
        start_new_session=True,
    )
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
        stop_group(proc.pid)
        raise RuntimeError(f"role {name} did not answer on port {port}")
    return proc


@contextmanager
def role(name: str, env: dict[str, str], *, workers: int = 2, threads: int = 4) -> Iterator[str]:
    """Start a role on a free loopback port; its base URL until the block ends."""
    port = free_port()
    proc = start(name, env, port, workers=workers, threads=threads)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(proc.pid)
        proc.wait()


def start_runtime(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """Start the subscription runtime the way its container does (``python main.py``, health on
    ``$PORT``) and wait until it answers its health check."""
    import sys

    logs = os.environ.get("NOETL_TEST_LOG_DIR")
    sink = open(Path(logs) / f"subscription_runtime-{port}.log", "ab") if logs else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "functions" / "subscription_runtime" / "main.py")],
        env={**os.environ, **env, "NOETL_ROLE": "subscription_runtime", "PORT": str(port)},
        stdout=sink,
        stderr=sink,
        start_new_session=True,
    )
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
        stop_group(proc.pid)
        raise RuntimeError(f"the subscription runtime did not answer on port {port}")
    return proc
