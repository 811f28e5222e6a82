"""``noetl-cloud executions list|show|tail`` against the local stack's control plane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from noetl_cloud.web.client import ApiClient

ROOT = Path(__file__).resolve().parents[2]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("noetl-cloud")), "executions", *args]
    keys = ("NOETL_API_URL", "NOETL_INTERNAL_API_TOKEN")
    return subprocess.run(
        command, env={**os.environ, **{k: env[k] for k in keys}}, capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def start(api: ApiClient) -> str:
    return str(api.post("/api/execute", json={"path": "console/noop"}).raise_for_error().json["execution_id"])


def test_tail_follows_a_new_execution_to_its_end(stack_env: dict[str, str], stack_api: ApiClient) -> None:
    eid = start(stack_api)
    done = cli(stack_env, "tail", eid, "--timeout", "90")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "playbook.started" in lines[0]
    assert any("step.done" in line and "step=end" in line for line in lines)
    assert lines[-1] == f"execution {eid} completed"


def test_list_shows_the_newest_first_with_filters_and_show_prints_one(
    stack_env: dict[str, str], stack_api: ApiClient
) -> None:
    first, second = start(stack_api), start(stack_api)
    done = cli(stack_env, "list", "--path", "console/noop", "--limit", "2", "--json")
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in done.stdout.splitlines()]
    assert [i["execution_id"] for i in items] == [second, first]
    table = cli(stack_env, "list", "--path", "console/noop", "--limit", "1")
    assert table.stdout.startswith(second) and "console/noop@" in table.stdout
    shown = cli(stack_env, "show", first, "--events")
    detail = json.loads(shown.stdout)
    assert detail["execution_id"] == first and detail["events"][0]["event_type"] == "playbook.started"


def test_an_invalid_filter_prints_the_api_error(stack_env: dict[str, str], stack_api: ApiClient) -> None:
    done = cli(stack_env, "list", "--status", "running")
    assert done.returncode == 2
    assert "invalid_filter" in done.stderr and "parameter: status" in done.stderr
