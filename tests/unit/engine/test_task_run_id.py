"""DSL v2 §9.3: every ``task.*`` event carries ``task_run_id``. One id per task attempt, shared by its
``task.started``, ``task.done`` and ``ctx.patched``; a retry, a jump back and each loop iteration are
new runs. Checked over every golden playbook."""

from __future__ import annotations

from collections import defaultdict

import pytest
import yaml

from noetl_cloud.engine import FakeClock, MemorySink
from noetl_cloud.engine.local import run_file
from noetl_cloud.engine.pipeline import task_run_id
from tests.unit.engine.conftest import loopback_tools
from tests.unit.engine.test_golden import NAMES, PLAYBOOKS, _fill

TASK_EVENTS = ("task.started", "task.done", "ctx.patched")


@pytest.mark.parametrize("name", NAMES)
def test_every_task_event_names_its_task_run(name: str, api: str) -> None:
    expected = yaml.safe_load((PLAYBOOKS / f"{name}.expected.yaml").read_text())
    sink = MemorySink()
    run_file(
        PLAYBOOKS / f"{name}.yaml",
        _fill(expected.get("workload"), api),
        sink=sink,
        clock=FakeClock(),
        tools=loopback_tools(),
    )
    runs: dict[tuple[str | None, str], list[str]] = defaultdict(list)
    for event in sink.events:
        if event.event_type.startswith("task.") or event.event_type == "ctx.patched":
            assert event.event_type in TASK_EVENTS
            run_id = event.payload.get("task_run_id")
            assert isinstance(run_id, str) and run_id.startswith(event.payload["step_run_id"] + "/"), event.payload
            runs[(event.execution_id, run_id)].append(event.event_type)
    for kinds in runs.values():  # one attempt: started, done, and at most one ctx patch after it
        assert kinds[:2] == ["task.started", "task.done"] and set(kinds[2:]) <= {"ctx.patched"}, kinds


def test_a_retried_task_is_a_new_run_each_attempt() -> None:
    sink = MemorySink()
    run_file(PLAYBOOKS / "retry_backoff.yaml", None, sink=sink, clock=FakeClock())
    started = [e.payload for e in sink.events if e.event_type == "task.started"]
    assert len({p["task_run_id"] for p in started}) == len(started) > 1
    assert any(p["attempt"] > 1 for p in started)


def test_the_id_is_derived_from_the_step_run_iteration_and_run_number() -> None:
    assert task_run_id("s1", None, 3) == "s1/3"
    assert task_run_id("s1", 0, 1) == "s1/0/1" != task_run_id("s1", 1, 1)
