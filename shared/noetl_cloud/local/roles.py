"""The roles (``functions/<role>/main.py``) and the maintenance scheduler as components of the local
stack: the roles served by gunicorn as the container image does, the subscription runtime and the
scheduler as their own Python processes; each healthy once ``/healthz`` answers on its port.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from noetl_cloud.local import process
from noetl_cloud.local.components import Component, StackError


def role(state_dir: Path, port: int, name: str, root: Path, env: dict[str, str], *, workers: int = 2) -> Component:
    log_path = state_dir / "logs" / f"{name}.log"
    source = root / "functions" / name

    def start() -> int:
        if not (source / "main.py").exists():
            raise StackError(f"no role {name!r}: {source / 'main.py'} does not exist")
        return process.spawn(
            process.gunicorn_argv(source, port=port, workers=workers, access_log=True),
            log_path=log_path,
            env={**os.environ, **env, "NOETL_ROLE": name},
        )

    return _role_component(name, port, f"127.0.0.1:{port}", start, log_path)


def _role_component(name: str, port: int, marker: str, start: Callable[[], int], log_path: Path) -> Component:
    """A role: healthy once ``/healthz`` answers on its port, stopped with its process group."""
    return Component(
        name=name,
        port=port,
        marker=marker,
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/healthz"),
        stop=process.stop_group,
        env={},
        log_path=log_path,
    )


def runtime(state_dir: Path, port: int, root: Path, env: dict[str, str]) -> Component:
    """The subscription runtime as its container runs it (``python main.py``: the pull loop, health on
    ``$PORT``); gunicorn would serve its health only. ``-X noetl_port=N`` marks its command line."""
    name = "subscription_runtime"
    log_path = state_dir / "logs" / f"{name}.log"
    source = root / "functions" / name

    def start() -> int:
        if not (source / "main.py").exists():
            raise StackError(f"no role {name!r}: {source / 'main.py'} does not exist")
        return process.spawn(
            [sys.executable, "-X", f"noetl_port={port}", str(source / "main.py")],
            log_path=log_path,
            env={**os.environ, **env, "NOETL_ROLE": name, "PORT": str(port)},
            cwd=source,
        )

    return _role_component(name, port, f"noetl_port={port}", start, log_path)


def scheduler(state_dir: Path, port: int, urls: dict[str, str], env: dict[str, str]) -> Component:
    """The maintenance scheduler (noetl_cloud.maintenance.scheduler): Cloud Scheduler's jobs, locally.
    ``-X noetl_port=N`` marks its command line."""
    log_path = state_dir / "logs" / "scheduler.log"

    def start() -> int:
        argv = [sys.executable, "-X", f"noetl_port={port}", "-m", "noetl_cloud.maintenance.scheduler"]
        argv += ["--port", str(port), *(f"--url={role}={url}" for role, url in sorted(urls.items()))]
        return process.spawn(argv, log_path=log_path, env={**os.environ, **env, "NOETL_ROLE": "scheduler"})

    return Component(
        name="scheduler",
        port=port,
        marker=f"noetl_port={port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/healthz"),
        stop=process.stop_group,
        env={},
        log_path=log_path,
    )
