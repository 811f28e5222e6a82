"""The tool port: what a task hands a tool (:class:`ToolCall`), what a tool returns (:class:`Outcome`, §5.3),
and the clock the engine waits on between retries.

Tools are injected: the engine finds them through a :class:`ToolResolver` (``noetl_cloud.tools.registry``
provides one) and never imports a concrete tool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

OutcomeStatus = Literal["ok", "error"]


@dataclass(frozen=True)
class Outcome:
    """The one final outcome of a task (§5.3).

    ``extra`` holds the kind-specific stable fields, keyed by namespace: ``{"http": {"status": 503}}``,
    ``{"pg": {"code": "40001", "sqlstate": "40001"}}``, ``{"py": {"exception_type": "ValueError"}}``.
    """

    status: OutcomeStatus
    result: Any = None
    error: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def ok(cls, result: Any = None, **extra: dict[str, Any]) -> Outcome:
        """A successful outcome carrying ``result``."""
        return cls(status="ok", result=result, extra=dict(extra))

    @classmethod
    def fail(cls, kind: str, message: str, **extra: dict[str, Any]) -> Outcome:
        """An error outcome: ``error = {"kind": kind, "message": message}``."""
        return cls(status="error", error={"kind": kind, "message": message}, extra=dict(extra))

    def with_meta(self, **meta: Any) -> Outcome:
        """A copy with ``meta`` extended."""
        return Outcome(self.status, self.result, self.error, {**self.meta, **meta}, self.extra)

    def to_dict(self) -> dict[str, Any]:
        """The envelope as templates see it: ``{status, result, error, meta, <kind fields>}``."""
        body: dict[str, Any] = {"status": self.status, "result": self.result, "error": self.error, "meta": self.meta}
        for namespace, fields in self.extra.items():
            body.setdefault(namespace, fields)
        return body


@dataclass(frozen=True)
class ToolCall:
    """One invocation of a tool: the rendered task body and where it runs.

    ``config`` is the task mapping without ``kind`` and ``spec``, rendered; ``spec`` is ``task.spec`` without
    ``policy``, rendered (timeouts and other runtime knobs, §5.2).
    """

    kind: str
    config: dict[str, Any]
    spec: dict[str, Any]
    execution_id: str
    step: str
    task: str
    attempt: int
    keychain: Mapping[str, Any] = field(default_factory=dict)
    run_child: Callable[[str, dict[str, Any]], Outcome] | None = None


class Tool(Protocol):
    """A tool kind. ``raw_fields`` names config keys the engine must not render (code, for instance)."""

    kind: str
    raw_fields: tuple[str, ...]

    def run(self, call: ToolCall) -> Outcome:
        """Run once and return the final outcome. Expected failures are error outcomes, never exceptions."""
        ...


class ToolResolver(Protocol):
    """Where the engine finds the tool for a kind."""

    def get(self, kind: str) -> Tool:
        """The tool of ``kind``; raises :class:`~noetl_cloud.tools.registry.UnknownTool` if none."""
        ...


class Clock(Protocol):
    """Time as the engine sees it; tests inject a fake one so nothing sleeps."""

    def now(self) -> float:
        """Seconds (monotonic) for durations."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` before a retry."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that records the waits asked of it and advances instantly."""

    def __init__(self, start: float = 0.0) -> None:
        self.current = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        """The fake time."""
        return self.current

    def sleep(self, seconds: float) -> None:
        """Record the wait and advance the fake time."""
        self.sleeps.append(seconds)
        self.current += seconds
