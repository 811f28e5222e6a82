"""A span around each tool call of the worker: the registry the worker runs with, wrapped."""

from __future__ import annotations

from noetl_cloud.engine.outcome import Outcome, Tool, ToolCall, ToolResolver
from noetl_cloud.telemetry.spans import span, tracing


def traced_tools(resolver: ToolResolver) -> ToolResolver:
    """``resolver`` whose tools run each call in a span ``tool.<kind>`` while tracing is on (decided
    per call: the worker builds its registry before the web layer configures telemetry); off, the
    tool itself, unwrapped."""
    return _TracedResolver(resolver)


class _TracedResolver:
    def __init__(self, inner: ToolResolver) -> None:
        self.inner = inner

    def get(self, kind: str) -> Tool:
        tool = self.inner.get(kind)
        return _TracedTool(tool) if tracing() else tool

    def kinds(self) -> list[str]:  # what the validator asks the registry (noetl_cloud.engine.validate)
        return list(getattr(self.inner, "kinds", list)())


class _TracedTool:
    def __init__(self, inner: Tool) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.raw_fields = inner.raw_fields

    def run(self, call: ToolCall) -> Outcome:
        attributes = {"noetl.execution_id": call.execution_id, "noetl.step": call.step, "noetl.task": call.task}
        with span(f"tool.{self.kind}", {**attributes, "noetl.attempt": call.attempt}) as opened:
            outcome = self.inner.run(call)
            if opened is not None:
                opened.set_attribute("noetl.status", str(outcome.status))
            return outcome
