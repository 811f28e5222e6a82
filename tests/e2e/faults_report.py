"""The fault suite's table (terminal summary) and its Results section in docs/faults.md.

The suite writes the section between the two markers below when every scenario of the module ran in
the session (a single scenario run with ``-k`` prints its row and leaves the document alone);
``NOETL_TEST_FAULTS_DOC`` names another file to write (``NOETL_TEST_FAULTS_DOC=`` writes none).
"""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from tests.e2e.faults import Outcome
from tests.e2e.roles import ROOT

BEGIN = "<!-- results: written by tests/e2e/test_faults.py; do not edit by hand -->"
END = "<!-- end of results -->"
DOC = ROOT / "docs" / "faults.md"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(outcomes: list[Outcome]) -> list[str]:
    head = (
        f"{'scenario':<24} {'msgs':>5} {'lost':>5} {'dup effects':>11} {'recovery s':>10} {'execs':>6} "
        f"{'dup execs':>9} {'completed':>9} {'reissued':>8} {'re-sent':>7} {'parity':>6} {'secs':>6}"
    )
    lines = [head, "-" * len(head)]
    for o in outcomes:
        lines.append(
            f"{o.scenario:<24} {o.messages_in:>5} {o.lost:>5} {o.effect_reruns:>11} {_secs(o.recovery_s):>10} "
            f"{o.executions:>6} {o.duplicates:>9} {o.completed:>9} {o.reissued:>8} {o.resent:>7} {o.parity_ok:>6} "
            f"{o.seconds:>6.1f}" + (f"  ({'; '.join(o.notes)})" if o.notes else "")
        )
    return lines


def target(ran_all: bool) -> Path | None:
    """The file to write the results to, or ``None``."""
    override = os.environ.get("NOETL_TEST_FAULTS_DOC")
    if override is not None:
        return Path(override) if override else None
    return DOC if ran_all else None


def write(path: Path, outcomes: list[Outcome], wall_s: float, passed: int, total: int) -> None:
    """Replace the Results section of ``path`` (between the markers; appended when they are missing)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        BEGIN,
        "",
        f"Last run: {when}, {os.cpu_count()} cores ({platform.machine()}), load average {load} at the end;",
        f"{passed} of {total} scenarios passed, {wall_s:.0f} s for the scenarios (the stack's start and stop aside).",
        "",
        "```",
        *table(outcomes),
        "```",
        "",
        END,
    ]
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(body) + rest.split(END, 1)[1]
    else:
        text = text + ("\n" if text and not text.endswith("\n") else "") + "\n".join(body) + "\n"
    path.write_text(text)


__all__ = ["table", "target", "write"]
