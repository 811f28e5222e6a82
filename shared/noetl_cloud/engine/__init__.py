"""The DSL v2 interpreter (dsl-v2-spec): pure, with tools, event sinks, clock and payload store injected.

Entry point: :class:`~noetl_cloud.engine.runner.Engine` (``Engine(tools=..., sink=...).run(doc, workload)``);
:func:`~noetl_cloud.engine.local.run_file` runs a playbook file for the ``noetl-cloud run`` command.
"""

from noetl_cloud.engine.events import EventSink, MemorySink
from noetl_cloud.engine.outcome import Clock, FakeClock, Outcome, SystemClock, Tool, ToolCall, ToolResolver
from noetl_cloud.engine.payloads import MemoryPayloadStore, PayloadStore
from noetl_cloud.engine.runner import Engine, ExecutionResult, Token
from noetl_cloud.engine.templates import Renderer, TemplateFailure

__all__ = [
    "Clock",
    "Engine",
    "EventSink",
    "ExecutionResult",
    "FakeClock",
    "MemoryPayloadStore",
    "MemorySink",
    "Outcome",
    "PayloadStore",
    "Renderer",
    "SystemClock",
    "TemplateFailure",
    "Token",
    "Tool",
    "ToolCall",
    "ToolResolver",
]
