"""Process helpers of the local stack: start detached, probe, stop by process group.

Every component runs in its own session (``start_new_session``), so its process group holds it
and every child it forks (the emulators are shell scripts that start a JVM). ``down`` signals
that group and nothing else. A recorded pid is only trusted while ``/proc/<pid>/cmdline`` still
contains the component's marker, so a pid the kernel reused for another program is never
signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def alive(pid: int | None, marker: str) -> bool:
    """True while ``pid`` runs and is still the process we started (its cmdline has ``marker``)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    state = _proc_state(pid)
    return state not in ("Z", "X") and marker in cmdline(pid)


def _proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat.rsplit(")", 1)[-1].split()[0]


def spawn(argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start ``argv`` detached in its own session, output appended to ``log_path``; its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=cwd,
            close_fds=True,
        )
    return proc.pid


def gunicorn_argv(
    source: Path, *, port: int, target: str = "main:app", workers: int = 2, threads: int = 8, access_log: bool = False
) -> list[str]:
    """The command line that serves a role (``functions/<role>``) the way its container does."""
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--chdir",
        str(source),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--bind",
        f"127.0.0.1:{port}",
        "--graceful-timeout",
        "10",
    ]
    if access_log:
        # The path without its query: a push endpoint's token may ride in the query.
        argv += ["--access-logfile", "-", "--access-logformat", '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(M)sms']
    return [*argv, target]


def stop_group(pgid: int, *, timeout: float = 15.0) -> None:
    """SIGTERM a process group, then SIGKILL what is left after ``timeout``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while group_alive(pgid) and time.monotonic() < deadline + 5:
        time.sleep(0.1)


def group_stats(pgid: int) -> Iterator[list[str]]:
    """The ``/proc/<pid>/stat`` fields after the command name (state first, process group third) of
    every process in the group, as they are read."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid:
            yield fields


def group_alive(pgid: int) -> bool:
    """True while any live (not zombie) process is in the group."""
    if any(fields[0] not in ("Z", "X") for fields in group_stats(pgid)):
        return True
    # Reap our own children that have exited so they do not linger as zombies.
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
            return bool(200 <= response.status < 300)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until(check: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
