"""What the command prints besides its result: an error with what was found, and progress.

An error is its head line, ``noetl-cloud: <code>: <message>``, then one indented line per problem
the error's ``details`` name (``  <field>: <problem>``: a validator's field path and the problem
with its canonical fix), so a refused document says why without a second command. Progress lines
go to stderr and are flushed at once, so a long command shows where it is even through a pipe.
"""

from __future__ import annotations

import sys
from typing import Any

from noetl_cloud.errors import NoetlError

_SCALARS = (str, int, float, bool)


def error_lines(exc: NoetlError) -> list[str]:
    """The head line of ``exc`` and one line per problem its details name."""
    lines = detail_lines(exc.details)
    head = f"noetl-cloud: {exc.code}: {exc.message}"
    if lines and isinstance(exc.details, list):
        head += f" ({len(lines)} problem{'s' if len(lines) != 1 else ''}):"
    return [head, *lines]


def detail_lines(details: Any) -> list[str]:
    """``  <field>: <problem>`` for each problem of a validation error's details; ``  <key>: <value>``
    for the scalar entries of a mapping (``{"parameter": "tenant_id"}``); nothing for other shapes."""
    if isinstance(details, list):
        return [_problem_line(item) for item in details if isinstance(item, dict) and "problem" in item]
    if isinstance(details, dict):
        return [f"  {key}: {value}" for key, value in details.items() if isinstance(value, _SCALARS)]
    return []


def _problem_line(item: dict[str, Any]) -> str:
    field = item.get("field") or "$"
    return f"  {field}: {item['problem']}"


def report_error(exc: NoetlError) -> None:
    """Print ``exc`` to stderr as :func:`error_lines` shapes it."""
    for line in error_lines(exc):
        print(line, file=sys.stderr)


def progress(line: str) -> None:
    """One progress line on stderr, flushed."""
    print(line, file=sys.stderr, flush=True)


def say(line: str) -> None:
    """One line on stdout, flushed (``local up`` reports each component as it is ready)."""
    print(line, flush=True)
