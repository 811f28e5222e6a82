"""tests/parallel.py: every e2e module that drives the shared stack's own roles runs in the one unit that
keeps them serial (a module added without it would run beside the others on the same roles)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.parallel import FIRST_IN_UNIT, HEAVY, STACK_MODULES, STACK_UNIT, order

ROOT = Path(__file__).resolve().parents[2]
USES_STACK = re.compile(r"\b(stack_env|stack_api)\b")


def test_every_module_on_the_stacks_own_roles_is_a_stack_module() -> None:
    using = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests/e2e").glob("test_*.py")
        if USES_STACK.search(path.read_text())
    }
    assert using, "no e2e module uses the stack's fixtures: the pattern is stale"
    assert using <= STACK_MODULES, sorted(using - STACK_MODULES)
    assert all((ROOT / module).is_file() for module in STACK_MODULES)


def test_the_heavy_units_come_first_and_the_demo_first_in_the_stacks_unit() -> None:
    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    ids = [
        "tests/unit/test_ids.py::test_a",
        "tests/e2e/test_console.py::test_a",
        "tests/e2e/test_console_ops.py::test_b",
        "tests/e2e/test_demo.py::test_c",
        "tests/e2e/test_faults.py::test_d",
        "tests/e2e/test_console.py::test_e",
    ]
    items = [Item(nodeid) for nodeid in ids]
    order(items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [
        "tests/e2e/test_faults.py::test_d",
        "tests/e2e/test_demo.py::test_c",
        "tests/e2e/test_console.py::test_a",
        "tests/e2e/test_console_ops.py::test_b",
        "tests/e2e/test_console.py::test_e",
        "tests/unit/test_ids.py::test_a",
    ]
    assert set(FIRST_IN_UNIT) <= STACK_MODULES
    assert all((ROOT / unit).is_file() for unit in HEAVY if unit != STACK_UNIT)
