"""The runnable ``examples/`` on the local stack: ``noetl-cloud execute FILE --wait`` registers each file, runs
it through the control plane and the workers, and ends with the results ``noetl-cloud run`` gives
(``tests/unit/test_examples.py``); the child-playbook example once its child is registered, as its header says."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_examples import EXPECTED, RUNNABLE, _header

ROOT = Path(__file__).resolve().parents[2]


def execute(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    keys = ("NOETL_API_URL", "NOETL_INTERNAL_API_TOKEN")
    return subprocess.run(
        [str(Path(sys.executable).with_name("noetl-cloud")), "execute", *args, "--wait", "--quiet"],
        env={**os.environ, **{key: env[key] for key in keys}},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_runnable_example_runs_on_the_stack_as_in_process(path: Path, stack_env: dict[str, str]) -> None:
    name = str(path.relative_to(ROOT / "examples"))
    if name == "sub_playbook.yaml":  # its child first: the distributed runtime finds it in the catalog
        child = execute(stack_env, "examples/children/greet.yaml")
        assert child.returncode == 0, child.stderr
    command = shlex.split(_header(path, "Run") or "")
    done = execute(stack_env, *command[2:])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed", result["error"]
    for step, expected in EXPECTED[name].items():
        assert result["results"][step] == expected
    if name == "sub_playbook.yaml":
        assert [child["results"]["start"] for child in result["results"]["start"]] == ["hi Ada", "hi Grace"]


def test_the_pull_subscription_example_runs_each_published_reading(stack_env: dict[str, str], tmp_path: Path) -> None:
    env = {**os.environ, **stack_env}
    bin_dir = Path(sys.executable).parent
    published = subprocess.run(
        [sys.executable, "examples/subscriptions/publish.py", "5"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert published.returncode == 0, published.stderr
    trail = tmp_path / "trail.jsonl"
    command = [str(bin_dir / "noetl-cloud"), "subscribe", "examples/subscriptions/sensors.yaml", "--local"]
    held = subprocess.run(
        [*command, "--max-messages", "5", "--events", str(trail), "--duration", "120"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert held.returncode == 0, held.stderr
    summary = json.loads(held.stdout)
    assert summary["runs"] == 5 and summary["completed"] == 5
    events = [json.loads(line) for line in trail.read_text().splitlines()]
    results = [e["payload"]["result"] for e in events if e["event_type"] == "step.done"]
    assert len(results) == 5
    for result in results:  # reading i is 25 + 3i degrees: hot from s-2 on
        assert result["hot"] == (int(result["sensor"].removeprefix("s-")) >= 2), result
