"""Frame bounds (frames/cursor.py FrameBounds): which rows a frame takes under ``max_bytes`` and
``max_seconds`` on an injected clock; and the playbook rule that a bound needs ``cursor.release``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from noetl_cloud.engine import FakeClock
from noetl_cloud.engine.model import compile_playbook
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.frames.cursor import FrameBounds
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.spec import parse_document

ROW = {"id": 1, "pad": "x" * 83}  # 100 bytes as compact JSON
assert len(json.dumps(ROW, separators=(",", ":"))) == 100


def test_a_frame_takes_rows_while_they_fit_in_max_bytes_and_always_its_first() -> None:
    bounds = FrameBounds(FramePolicy(max_rows=50, max_bytes=1024), FakeClock(), enforced=True)
    assert bounds.count([ROW] * 50) == 10 and bounds.hit == "max_bytes" and bounds.bytes == 1000
    big = {"id": 1, "pad": "x" * 5000}
    first = FrameBounds(FramePolicy(max_rows=50, max_bytes=1024), FakeClock(), enforced=True)
    assert first.count([big, ROW]) == 1  # a row larger than the bound still makes progress, alone


def test_a_frame_stops_taking_rows_at_max_seconds_on_its_clock() -> None:
    clock = FakeClock()
    bounds = FrameBounds(FramePolicy(max_rows=50, max_seconds=2.5), clock, enforced=True)
    taken = []
    for index in range(10):
        if not bounds.take(ROW, index):
            break
        taken.append(index)
        clock.current += 1.0  # the row's work
    assert taken == [0, 1, 2] and bounds.hit == "max_seconds"


def test_without_release_every_claimed_row_is_taken() -> None:
    bounds = FrameBounds(FramePolicy(max_rows=50), FakeClock(), enforced=False)
    assert bounds.count([{"pad": "x" * 10**6}] * 50) == 50 and bounds.hit is None


def cursor_playbook(frame: str, release: str = "") -> Any:
    return parse_document(
        f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: bounded, path: tests/bounded}}
workflow:
  - step: fetch
    loop:
      iterator: row
      cursor: {{kind: postgres, auth: pg, claim: "SELECT 1"{release}}}
      spec: {{mode: cursor, frame: {{max_rows: 10{frame}}}}}
    tool: {{kind: noop}}
"""
    )


@pytest.mark.parametrize("bound", ["max_seconds: 5", "max_bytes: 4096"])
def test_a_frame_bound_without_release_is_refused_with_its_fix(bound: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        compile_playbook(cursor_playbook(f", {bound}"))
    text = json.dumps(info.value.to_dict())
    assert f"fetch.loop.spec.frame.{bound.split(':')[0]}" in text and "cursor.release" in text


def test_a_frame_bound_with_release_compiles_and_release_must_be_sql() -> None:
    plans = compile_playbook(cursor_playbook(", max_bytes: 4096", ', release: "UPDATE q SET f = NULL"'))
    loop = plans["fetch"].loop
    assert loop is not None and loop.frame is not None and loop.frame.max_bytes == 4096
    assert compile_playbook(cursor_playbook(""))["fetch"].loop is not None  # no bound: no release needed
    with pytest.raises(ValidationFailed):
        compile_playbook(cursor_playbook("", ", release: 3"))
