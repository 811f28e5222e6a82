"""tests/parallel.py: every e2e module that drives the shared stack's own roles runs in the one unit that
keeps them serial (a module added without it would run beside the others on the same roles)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.parallel import STACK_MODULES

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
