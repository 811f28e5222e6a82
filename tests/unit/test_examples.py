"""``examples/``: every file is a valid catalog document, and every one whose header says ``# Run:`` runs with
exactly that command, in this process, to the results written here (the rest say what they ``# Needs:``)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.cli import main
from noetl_cloud.engine.local import load_playbook
from noetl_cloud.spec import PlaybookDoc, parse_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


def _header(path: Path, label: str) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {label}:"):
            return line.split(":", 1)[1].strip()
    return None


RUNNABLE = [path for path in EXAMPLES if _header(path, "Run") is not None]

#: What each runnable example's command must end with (results of steps named here).
EXPECTED: dict[str, dict[str, Any]] = {
    "hello.yaml": {"start": "Hello, Ada!", "shout": "HELLO, ADA!"},
    "pipeline_policy.yaml": {"start": "took 3 attempts (ctx says 3)"},
    "loop_parallel.yaml": {"total": 26},
    "pagination.yaml": {
        "fetch_all": [{"endpoint": "rooms", "items": [0, 1, 2, 3, 4]}, {"endpoint": "guests", "items": [0, 1]}]
    },
    "routing.yaml": {
        "start": 250,
        "audit": "audited",
        "review": "sent to review: ValueError: 250 needs a manual review",
    },
    "children/greet.yaml": {"start": "hi nobody"},
    "sub_playbook.yaml": {},
    "subscriptions/reading.yaml": {"start": {"sensor": "s-1", "hot": True}},  # --set payload.celsius=31
}


def test_there_are_examples_and_each_says_how_to_run_it() -> None:
    assert len(EXAMPLES) >= 8 and len(RUNNABLE) >= 6
    for path in EXAMPLES:
        assert (_header(path, "Run") is None) != (_header(path, "Needs") is None), f"{path}: one Run: or Needs:"
    assert {str(path.relative_to(ROOT / "examples")) for path in RUNNABLE} == set(EXPECTED)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_example_validates(path: Path) -> None:
    doc = parse_document(path.read_text())
    if isinstance(doc, PlaybookDoc):
        load_playbook(path)  # registration's checks too
    else:
        assert doc.kind == "Subscription"


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_runnable_example_runs_with_its_command(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    command = shlex.split(_header(path, "Run") or "")
    assert command[:2] == ["noetl-cloud", "run"] and command[2] == str(path.relative_to(ROOT))
    monkeypatch.chdir(ROOT)
    code = main([*command[1:], "--quiet"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["status"] == "completed", printed["error"]
    for step, result in EXPECTED[str(path.relative_to(ROOT / "examples"))].items():
        assert printed["results"][step] == result


def test_the_sub_playbook_example_runs_its_child_once_per_element(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["run", "examples/sub_playbook.yaml", "--quiet"]) == 0
    children = json.loads(capsys.readouterr().out)["results"]["start"]
    assert [child["results"]["start"] for child in children] == ["hi Ada", "hi Grace"]
