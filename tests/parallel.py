"""Running the suite in worker processes (pytest-xdist; ``make test`` runs ``pytest -n N --dist loadscope``).

What a parallel run changes, and where it is handled:

- Scheduling: a work unit is a whole module (its module fixtures set up once), except the e2e modules
  that drive the shared stack's own roles (``STACK_MODULES``), which form one unit and so run one after
  another in one worker, as in a serial run. The most expensive units are handed out first
  (``HEAVY``), so the long ones do not start last.
- Shared resources: a worker starts the local stack (or its Kafka broker) under a file lock in the
  stack's state folder, so two workers never start it at once; a worker never stops it (another one
  may still use it): the controller stops what a worker started, once every worker has ended.
- Databases: each worker migrates a template database of its own (tests/conftest.py).
- Summary sections (the stack the tiers ran against, the fault table, the fuzz counts) are computed
  in a worker: each worker hands its sections to the controller, which prints them (``put_section``).

Without ``-n`` none of this applies: the hooks below do nothing and the sections are printed by the
process that ran the tests.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# The e2e modules that use the running stack's own roles (``stack_env``, ``stack_api``, their ports): one
# work unit.
STACK_MODULES = frozenset(
    {
        "tests/e2e/test_console.py",
        "tests/e2e/test_console_ops.py",
        "tests/e2e/test_console_spool.py",
        "tests/e2e/test_demo.py",
        "tests/e2e/test_examples_distributed.py",
        "tests/e2e/test_executions_cli.py",
        "tests/e2e/test_least_privilege.py",
        "tests/e2e/test_openapi_fuzz.py",  # fuzzes the stack's roles on their ports
        "tests/e2e/test_scheduled_subscription.py",
        "tests/e2e/test_tracing.py",
    }
)
STACK_UNIT = "e2e: the shared stack's roles"
# Within the stack's unit, the demo first: it leaves the demo's executions (a cursor loop's committed
# frames among them) that the console's payload preview test shows, which otherwise runs the demo itself
# on a fresh stack (``make test``'s), and the demo ran twice.
FIRST_IN_UNIT = ("tests/e2e/test_demo.py",)
# The most expensive units first (longest processing time first; seconds of worker time in a `-n 3` run
# on the 2-core machine, load average 7 to 9, 2026-11-27; docs/testing.md); every other unit keeps its
# collection order after them.
HEAVY = (
    "tests/e2e/test_faults.py",  # 243 s
    "tests/e2e/test_subscription_runtime.py",  # 229 s
    STACK_UNIT,  # 186 s
    "tests/e2e/test_edge_hardening.py",  # 95 s
    "tests/e2e/test_ingress_push.py",  # 76 s
    "tests/e2e/test_distributed.py",  # 74 s
    "tests/e2e/test_spool_outage.py",  # 67 s
    "tests/e2e/test_replay_e2e.py",  # 67 s
    "tests/e2e/test_local_stack.py",  # 62 s
    "tests/e2e/test_edge_every_role.py",  # 60 s
    "tests/integration/test_cursor_loops.py",  # 46 s
    "tests/integration/test_frames_leases.py",  # 44 s
    "tests/e2e/test_subscription_runtime_soak.py",  # 42 s
    "tests/e2e/test_task_isolation.py",  # 40 s
    "tests/integration/test_kafka_source.py",  # 40 s
    "tests/e2e/test_image_command.py",  # 38 s
    "tests/e2e/test_frames_cursor.py",  # 32 s
)

SECTIONS = pytest.StashKey[dict[str, list[str]]]()
STARTED = pytest.StashKey[set[str]]()
_STARTED_OUT = "noetl_started"
_SECTIONS_OUT = "noetl_sections"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the shared stack's unit."""
    module = nodeid.split("::", 1)[0]
    return STACK_UNIT if module in STACK_MODULES else module


def order(items: list[pytest.Item]) -> None:
    """Put the heavy units' tests first, and within a unit the modules of ``FIRST_IN_UNIT`` first (in
    place; stable, so each module keeps its order)."""
    rank = {unit: i for i, unit in enumerate(HEAVY)}
    first = {module: i for i, module in enumerate(FIRST_IN_UNIT)}

    def key(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        return rank.get(unit_of(item.nodeid), len(HEAVY)), first.get(module, len(FIRST_IN_UNIT))

    items.sort(key=key)


# -- shared resources ------------------------------------------------------------------------------


@contextmanager
def exclusive(state_dir: Path, name: str) -> Iterator[None]:
    """Hold ``<state_dir>/.<name>.lock`` (one process at a time, across the workers)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / f".{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def started_here(config: pytest.Config, what: str) -> None:
    """In a worker, record that it started ``what`` (``stack``, ``kafka``): the controller stops it
    at the end (outside xdist the fixture that started it stops it)."""
    if is_worker(config):
        config.stash.setdefault(STARTED, set()).add(what)


def owns_teardown(config: pytest.Config) -> bool:
    """Whether a session fixture that started a shared resource stops it itself (not in a worker)."""
    return not is_worker(config)


# -- summary sections ----------------------------------------------------------------------------


def put_section(config: pytest.Config, title: str, lines: list[str]) -> None:
    """A section of the terminal summary (replacing one of the same title)."""
    config.stash.setdefault(SECTIONS, {})[title] = list(lines)


def sections(config: pytest.Config) -> dict[str, list[str]]:
    return config.stash.get(SECTIONS, {})


# -- xdist hooks -------------------------------------------------------------------------------------


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # the collection order (``order``) is the work order
    return ModuleScheduling(config, log)


def worker_sessionfinish(config: pytest.Config) -> None:
    """In a worker: hand what it started and its sections to the controller."""
    if not is_worker(config):
        return
    output = config.workeroutput  # type: ignore[attr-defined]
    output[_STARTED_OUT] = sorted(config.stash.get(STARTED, set()))
    output[_SECTIONS_OUT] = sections(config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In the controller: gather a worker's sections and what it started."""
    output = getattr(node, "workeroutput", None) or {}
    config = node.config
    mine = config.stash.setdefault(SECTIONS, {})
    for title, lines in output.get(_SECTIONS_OUT, {}).items():
        if mine.get(title, lines) != lines:  # the same section from two workers: both parts
            lines = [*mine[title], *lines]
        mine[title] = lines
    config.stash.setdefault(STARTED, set()).update(output.get(_STARTED_OUT, []))
