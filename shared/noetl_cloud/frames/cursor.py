"""The cursor driver's statements for one frame (docs/frames.md): ``claim`` takes the frame's rows,
``release`` gives back the rows a bounded frame did not take; and the frame's bounds.

Both statements are rendered with ``__frame_max_rows``, ``__frame_id``, ``__frame_index`` and
``__frame_attempt`` only (integers: nothing a caller controls reaches the SQL text); ``params`` are
rendered with the step's scope and the same names, and bound. ``release`` also gets ``:rows``, the
untaken rows as a JSON array.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from noetl_cloud.engine.model import Loop
from noetl_cloud.engine.outcome import Clock, ToolCall, ToolResolver
from noetl_cloud.engine.pipeline import StepContext
from noetl_cloud.engine.templates import Renderer, TemplateFailure, build_scope
from noetl_cloud.frames.policy import FramePolicy


class FrameBounds:
    """Whether a frame takes its next row: always the first; then while the rows taken stay within
    ``max_bytes`` (as compact JSON) and the frame has run less than ``max_seconds`` on ``clock``. Every row
    is taken when not ``enforced`` (a cursor without ``release`` cannot give rows back)."""

    def __init__(self, policy: FramePolicy, clock: Clock, *, enforced: bool) -> None:
        self.policy = policy
        self.clock = clock
        self.enforced = enforced
        self.started = clock.now()
        self.bytes = 0
        self.hit: str | None = None  # the bound that stopped the frame

    def take(self, row: Any, index: int) -> bool:
        if not self.enforced:
            return True
        size = len(json.dumps(row, default=str, separators=(",", ":")).encode())
        if index > 0:
            if self.clock.now() - self.started >= self.policy.max_seconds:
                self.hit = "max_seconds"
                return False
            if self.bytes + size > self.policy.max_bytes:
                self.hit = "max_bytes"
                return False
        self.bytes += size
        return True

    def count(self, rows: list[Any]) -> int:
        """How many of ``rows`` the frame takes, in order."""
        return next((i for i, row in enumerate(rows) if not self.take(row, i)), len(rows))


def run_statement(
    tools: ToolResolver,
    renderer: Renderer,
    sc: StepContext,
    loop: Loop,
    frame: Mapping[str, Any],
    *,
    statement: str,
    max_rows: int,
    rows: list[Any] | None = None,
) -> tuple[Any, dict[str, Any] | None]:
    """Run ``loop.cursor[statement]`` for ``frame``: the tool's result, or the failure (``task``: the statement)."""
    cursor = loop.cursor or {}
    task = "cursor" if statement == "claim" else statement
    binds = {
        "__frame_max_rows": max_rows,
        "__frame_id": int(frame["frame_id"]),
        "__frame_index": int(frame.get("frame_index") or 0),
        "__frame_attempt": int(frame.get("attempt") or 1),
    }
    try:
        sql = renderer.render(cursor[statement], binds, step=sc.step, task=task)
        scope = {**build_scope(workload=sc.workload, ctx=sc.ctx.data, args=sc.args), **binds}
        params = renderer.render(cursor.get("params") or {}, scope, step=sc.step, task=task)
        dsn = renderer.render(cursor.get("dsn"), scope, step=sc.step, task=task)
    except TemplateFailure as exc:
        return None, {"kind": exc.code, "message": exc.message, "task": task}
    keychain, auth = sc.keychain, cursor.get("auth")
    if isinstance(dsn, str) and dsn:  # a DSN named in the playbook instead of a keychain alias
        keychain, auth = {**keychain, "__cursor__": {"kind": "postgres", "dsn": dsn}}, "__cursor__"
    if rows is not None:
        params = {**(params if isinstance(params, dict) else {}), "rows": json.dumps(rows, default=str)}
    call = ToolCall(
        kind=str(cursor.get("kind")),
        config={"query" if statement == "claim" else "command": sql, "params": params, "auth": auth},
        spec={},
        execution_id=sc.execution_id,
        step=sc.step,
        task=task,
        attempt=binds["__frame_attempt"],
        keychain=keychain,
    )
    outcome = tools.get(call.kind).run(call)
    if outcome.status != "ok":
        return None, {**(outcome.error or {}), "task": task}
    return outcome.result, None
