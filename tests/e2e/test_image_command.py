"""The image's start command, run locally: functions/entrypoint.sh (the Dockerfile's ENTRYPOINT) serves
each role that exists against the local stack, exactly as the container would, from this checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from noetl_cloud.local.process import http_ok, stop_group, wait_until
from noetl_cloud.web.client import ApiClient, static_token
from tests.e2e.roles import free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "functions" / "entrypoint.sh"
TOKEN = "image-command-token"
BUILT_ROLES = sorted(p.parent.name for p in (ROOT / "functions").glob("*/main.py"))


def test_the_dockerfile_starts_the_entrypoint_script() -> None:
    dockerfile = (ROOT / "functions" / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["/app/functions/entrypoint\.sh"\]$', dockerfile, re.M)
    assert re.search(r"^USER 10001", dockerfile, re.M), "the image runs as a non-root user"
    assert re.search(r"^COPY functions/ /app/functions/$", dockerfile, re.M)
    assert os.access(ENTRYPOINT, os.X_OK)


def _env(role: str, port: int, extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        **extra,
        "NOETL_ROLE": role,
        "PORT": str(port),
        "NOETL_APP_DIR": str(ROOT),
        # The image puts its venv first on PATH; here, this interpreter's.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


@contextmanager
def image_command(role: str, extra: dict[str, str]) -> Iterator[str]:
    """Run the image's start command for ``role`` on a free port; its base URL once /healthz answers."""
    port = free_port()
    proc = subprocess.Popen(
        [str(ENTRYPOINT)],
        env=_env(role, port, extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz") or proc.poll() is not None, timeout=30):
            raise AssertionError(f"{role}: no answer on /healthz")
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"{role}: the start command exited with {proc.returncode}: {err[-2000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(proc.pid)
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.parametrize("role", BUILT_ROLES)
def test_each_role_starts_with_the_image_command(role: str, local_env: dict[str, str], database_url: str) -> None:
    env = {**local_env, "NOETL_DATABASE_URL": database_url, "NOETL_INTERNAL_API_TOKEN": TOKEN}
    if role != "execute":
        env["NOETL_API_URL"] = "http://127.0.0.1:9"  # health needs no control plane
    if role == "worker":
        env["NOETL_WORKER_PUSH_TOKEN"] = TOKEN  # the worker refuses to start without a way to check pushes
    if role == "projector":
        env["NOETL_PROJECTOR_PUSH_TOKEN"] = TOKEN  # so does the projector
    with image_command(role, env) as url:
        assert http_ok(f"{url}/healthz")
        if role == "execute":
            # The control plane reached its database through the same command.
            with ApiClient(url, token_source=static_token(TOKEN)) as api:
                assert api.get("/api/catalog").raise_for_error().status == 200


def test_ingress_forwards_to_execute_both_started_by_the_image_command(
    local_env: dict[str, str], database_url: str
) -> None:
    env = {**local_env, "NOETL_DATABASE_URL": database_url, "NOETL_INTERNAL_API_TOKEN": TOKEN}
    with image_command("execute", env) as api_url, image_command("ingress", {**env, "NOETL_API_URL": api_url}) as url:
        # An unknown listener is looked up at the control plane: 404 from there, not 503.
        with ApiClient(url, token_source=static_token(TOKEN)) as client:
            response = client.post("/ingress/no-such-listener", json={})
        assert response.status == 404 and response.json["error"]["code"] == "unknown_listener"


def test_an_unknown_role_fails_fast() -> None:
    result = subprocess.run(
        [str(ENTRYPOINT)], env=_env("no_such_role", free_port(), {}), capture_output=True, timeout=10, check=False
    )
    assert result.returncode == 64
    assert b"unknown role 'no_such_role'" in result.stderr
