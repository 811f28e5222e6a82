"""docs/dsl.md is a self-contained reference: its support table names every section of the DSL v2
specification (§1-§13 and their subsections) with tests that exist, and the files it links to are in the
repository (nothing points outside it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "dsl.md").read_text()

#: The numbered sections of the DSL v2 specification.
SECTIONS = {
    "1.1", "1.2", "2.1", "2.2", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "4.1", "4.2", "5.1", "5.2", "5.3",
    "6.1", "6.2", "6.3", "6.4", "6.5", "6.6", "7.1", "7.2", "8.1", "8.2", "8.3", "8.4", "9.1", "9.2", "9.3",
    "10.1", "10.2", "11", "12", "13",
}  # fmt: skip


def _table() -> dict[str, list[str]]:
    support = DOC[DOC.index("## Support, section by section") :]
    rows: dict[str, list[str]] = {}
    for line in support.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"\d+(\.\d+)?", cells[0]):
            rows[cells[0]] = re.findall(r"`(tests/[^`]+::[^`]+)`", cells[3])
    return rows


def test_every_section_of_the_specification_has_a_row_with_tests() -> None:
    rows = _table()
    assert set(rows) == SECTIONS
    assert all(rows[section] for section in SECTIONS), [s for s in SECTIONS if not rows[s]]


def test_every_test_named_in_the_support_table_exists() -> None:
    for tests in _table().values():
        for name in tests:
            path, _, function = name.partition("::")
            function, _, param = function.partition("[")
            source = ROOT / path
            assert source.is_file(), name
            assert re.search(rf"^def {re.escape(function)}\(", source.read_text(), re.M), name
            param = param.rstrip("]")
            if function == "test_golden_playbook":
                assert (ROOT / "tests/data/playbooks" / f"{param}.yaml").is_file(), name
            elif function.startswith("test_every_runnable_example"):
                assert (ROOT / "examples" / param).is_file(), name


def test_the_reference_points_only_inside_the_repository() -> None:
    assert "/work/" not in DOC and "dsl-v2-spec" not in DOC
    for target in re.findall(r"\]\(([^)#]+)\)", DOC):
        if not target.startswith("http"):
            assert (ROOT / "docs" / target).resolve().exists(), target


def test_the_first_playbook_shown_is_the_example_file() -> None:
    shown = re.search(
        r"```yaml\n(apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: hello\n.*?)```", DOC, re.S
    )
    assert shown is not None
    example = (ROOT / "examples" / "hello.yaml").read_text()
    assert example.endswith(shown.group(1))
