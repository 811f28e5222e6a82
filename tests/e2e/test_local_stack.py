"""The local stack's own lifecycle through the real command: up, status, second up, down.

It runs a second stack in its own state folder and port range, so the stack the other tests use
is left alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from noetl_cloud.local.layout import ROLE_PORTS
from noetl_cloud.local.process import cmdline, port_open

PORT_BASE = "16430"
ROOT = Path(__file__).resolve().parents[2]
ROLES = [r for r in ROLE_PORTS if (ROOT / "functions" / r / "main.py").exists()]
COMPONENTS = ["postgres", "pubsub", "firestore", "gcs", "s3", *ROLES, "scheduler"]  # the scheduler after the roles


def cli(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETL_LOCAL_STATE_DIR": str(state), "NOETL_LOCAL_PORT_BASE": PORT_BASE}
    return subprocess.run(
        [sys.executable, "-m", "noetl_cloud.cli", "local", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=check,
    )


@pytest.fixture
def state(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "stack"
    yield folder
    cli(folder, "down", "--purge", check=False)


def test_up_status_second_up_and_down(state: Path) -> None:
    assert {"execute", "ingress", "worker", "spool_drainer"} <= set(ROLES)
    first = cli(state, "up", "--roles", "all")
    for name in COMPONENTS:
        assert f"{name:<10} started in" in first.stdout, first.stdout
    assert "migrations applied" in first.stdout

    status = json.loads(cli(state, "status", "--json").stdout)
    assert [s["name"] for s in status] == COMPONENTS
    assert all(s["healthy"] and s["startup_seconds"] > 0 for s in status)
    pids = {s["name"]: s["pid"] for s in status}
    ports = [s["port"] for s in status]

    second = cli(state, "up", "--roles", "all")
    assert all(f"{name:<10} reused" in second.stdout for name in COMPONENTS), second.stdout
    assert "started in" not in second.stdout
    assert {s["name"]: s["pid"] for s in json.loads(cli(state, "status", "--json").stdout)} == pids

    cli(state, "up")  # without roles, as the test suite brings the stack up: the running roles stay described
    env = cli(state, "env").stdout
    assert f"PUBSUB_EMULATOR_HOST='127.0.0.1:{int(PORT_BASE) + 5}'" in env
    assert f"@127.0.0.1:{int(PORT_BASE) + 2}/noetl'" in env
    assert f"NOETL_API_URL='http://127.0.0.1:{int(PORT_BASE) + 10}'" in env and "NOETL_INTERNAL_API_TOKEN=" in env

    # The roles really run a playbook: execute -> emulator push -> worker -> report, followed by the CLI.
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in env.splitlines() if line.startswith("export ")
    )
    run_env = {**os.environ, **{k: v.strip("'") for k, v in exported.items()}}
    playbook = Path(__file__).resolve().parents[1] / "data" / "playbooks" / "loop_sequential.yaml"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("noetl-cloud")), "execute", str(playbook), "--wait", "--quiet"],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"]["summary"] == "0:a:1:A,1:b:1:B,2:c:1:C"

    cli(state, "down")
    assert not any(port_open(port) for port in ports)
    assert all(cmdline(pid) == "" for pid in pids.values())
    stopped = cli(state, "status", check=False)
    assert stopped.returncode == 1 and "healthy" not in stopped.stdout


def test_up_refuses_a_port_it_did_not_start(state: Path) -> None:
    import socket

    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", int(PORT_BASE) + 2))
    blocker.listen()
    try:
        result = cli(state, "up", check=False)
    finally:
        blocker.close()
    assert result.returncode == 1
    assert "port 16432 is already in use" in result.stderr
