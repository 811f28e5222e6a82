"""Running roles the way their deployables run: gunicorn serving functions/<role>/main.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from noetl_cloud.local.process import group_alive, gunicorn_argv, http_ok, stop_group, wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(name: str, env: dict[str, str], port: int, *, workers: int = 2, threads: int = 4) -> subprocess.Popen[bytes]:
    """Start a role on ``port`` (gunicorn); :func:`answering` waits until it answers."""
    logs = os.environ.get("NOETL_TEST_LOG_DIR")  # set it to keep each role's output when debugging
    sink = open(Path(logs) / f"{name}-{port}.log", "ab") if logs else subprocess.DEVNULL
    return subprocess.Popen(
        gunicorn_argv(ROOT / "functions" / name, port=port, workers=workers, threads=threads, access_log=bool(logs)),
        env={**os.environ, **env, "NOETL_ROLE": name},
        stdout=sink,
        stderr=sink,
        start_new_session=True,
    )


def answering(name: str, proc: subprocess.Popen[bytes], port: int, *, timeout: float = 30) -> subprocess.Popen[bytes]:
    """``proc`` once the role answers its health check on ``port`` (stopped, and an error, if it does not
    within ``timeout``)."""
    if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=timeout):
        stop_group(proc.pid)
        raise RuntimeError(f"role {name} did not answer on port {port}")
    return proc


def start(name: str, env: dict[str, str], port: int, *, workers: int = 2, threads: int = 4) -> subprocess.Popen[bytes]:
    """Start a role on ``port`` and wait until it answers its health check."""
    return answering(name, spawn(name, env, port, workers=workers, threads=threads), port)


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


@contextmanager
def role_group(
    *specs: tuple[str, dict[str, str] | Callable[[dict[str, str]], dict[str, str]]], workers: int = 1, threads: int = 8
) -> Iterator[dict[str, str]]:
    """Start roles one after another on free loopback ports (a spec's env may be a function of the base
    URLs of the roles started before it); their base URLs by role until the block ends, when they are
    all stopped at once (:func:`stop_all`). By default each as the image serves it (functions/entrypoint.sh):
    one gunicorn worker of 8 threads."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for name, env in specs:
            port = free_port()
            procs.append(start(name, env(dict(urls)) if callable(env) else env, port, workers=workers, threads=threads))
            urls[name] = f"http://127.0.0.1:{port}"
        yield urls
    finally:
        stop_all(procs)


#: How long a test's teardown lets its roles stop by themselves after SIGTERM before it SIGKILLs them.
#: Gunicorn waits up to its graceful timeout (10 s) for a request thread still running, and a test can
#: leave one behind on purpose: a chunked body refused with 413 and never finished, a keep-alive
#: connection the client closed; a role idle at the end of a test is gone in about a second (the
#: gthread worker's poll). Nothing is asserted after a teardown stops its roles.
TEARDOWN_GRACE_S = 3.0


def stop_all(procs: Iterable[subprocess.Popen[bytes]], *, grace_s: float = TEARDOWN_GRACE_S) -> None:
    """Stop several roles at once at the end of a test: SIGTERM to every process group, SIGKILL to what
    is left after ``grace_s``, then reap them; N roles take as long as the slowest, not the sum of N."""
    procs = list(procs)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while any(group_alive(proc.pid) for proc in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in procs:
        if group_alive(proc.pid):
            stop_group(proc.pid, timeout=0)
    for proc in procs:
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
