"""Golden playbooks: each ``tests/data/playbooks/<name>.yaml`` runs with the built-in tools and must end with
the status, ctx, results and exact event-type sequence of ``<name>.expected.yaml``. An expected file with
``concurrent: true`` (a parallel loop) pins the events as a multiset and the order of all but the task
events and ctx patches, which interleave as the iterations' threads run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl_cloud.engine import FakeClock, MemorySink
from noetl_cloud.engine.local import run_file
from tests.unit.engine.conftest import loopback_tools

PLAYBOOKS = Path(__file__).resolve().parents[2] / "data" / "playbooks"
NAMES = sorted(p.name.removesuffix(".yaml") for p in PLAYBOOKS.glob("*.yaml") if not p.name.endswith(".expected.yaml"))


def _fill(value: Any, api: str) -> Any:
    if isinstance(value, str):
        return value.replace("{api}", api)
    if isinstance(value, dict):
        return {key: _fill(item, api) for key, item in value.items()}
    return value


def _outside_tasks(types: list[str]) -> list[str]:
    return [name for name in types if name not in ("task.started", "task.done", "ctx.patched")]


@pytest.mark.parametrize("name", NAMES)
def test_golden_playbook(name: str, api: str) -> None:
    expected = yaml.safe_load((PLAYBOOKS / f"{name}.expected.yaml").read_text())
    sink, clock = MemorySink(), FakeClock()
    result = run_file(
        PLAYBOOKS / f"{name}.yaml", _fill(expected.get("workload"), api), sink=sink, clock=clock, tools=loopback_tools()
    )
    assert result.status == expected["status"], result.error
    assert result.ctx == expected["ctx"]
    assert result.results == expected["results"]
    if expected.get("concurrent"):  # a parallel loop's iterations interleave as their threads run
        assert sorted(sink.types()) == sorted(expected["events"])
        assert _outside_tasks(sink.types()) == _outside_tasks(expected["events"])
    else:
        assert sink.types() == expected["events"]
    assert clock.sleeps == expected.get("sleeps", [])
