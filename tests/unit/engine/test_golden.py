"""Golden playbooks: each ``tests/data/playbooks/<name>.yaml`` runs with the built-in tools and must end with
the status, ctx, results and exact event-type sequence of ``<name>.expected.yaml``."""

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
    assert sink.types() == expected["events"]
    assert clock.sleeps == expected.get("sleeps", [])
