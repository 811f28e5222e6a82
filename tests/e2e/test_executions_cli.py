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


FAILING = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fails, path: cli/fails}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main():
            raise RuntimeError("asked to fail")
"""


def test_rerun_restarts_the_failed_executions_a_filter_matches_once_per_key(
    stack_env: dict[str, str], stack_api: ApiClient
) -> None:
    from noetl_cloud.local.process import wait_until

    stack_api.post("/api/catalog", json={"content": FAILING}).raise_for_error()
    parent = start(stack_api)  # the batch's own filter: its parent
    body = {"path": "cli/fails", "parent_execution_id": parent}
    failed = [str(stack_api.post("/api/execute", json=body).raise_for_error().json["execution_id"]) for _ in range(2)]

    def ended() -> bool:
        return all(stack_api.get(f"/api/executions/{eid}").json["status"] == "failed" for eid in failed)

    assert wait_until(ended, timeout=90), "the executions did not fail"
    too_many = cli(stack_env, "rerun", "--path", "cli/fails", "--parent", parent, "--max", "1")
    assert too_many.returncode == 2 and "too_many_executions" in too_many.stderr

    key = f"cli-{parent}"
    done = cli(stack_env, "rerun", "--status", "failed", "--path", "cli/fails", "--parent", parent, "--key", key)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines() + done.stdout.splitlines()
    started = {line.split(" -> ")[0]: line.split(" -> ")[1].split()[0] for line in lines if " -> " in line}
    assert sorted(started) == sorted(failed) and any("done · 2 of 2 · started 2" in line for line in lines)
    for old, new in started.items():
        assert stack_api.get(f"/api/executions/{new}").raise_for_error().json["meta"]["rerun_of"] == old

    again = cli(stack_env, "rerun", "--path", "cli/fails", "--parent", parent, "--key", key)  # a retry
    assert again.returncode == 0, again.stderr
    assert f"{failed[0]} -> {started[failed[0]]} (started)" in again.stderr + again.stdout  # the same operation
    listed = stack_api.get(f"/api/executions?parent={parent}&path=cli/fails").raise_for_error().json["items"]
    assert len(listed) == 4  # the two and their re-runs (which keep the parent): the retry started none
