"""The tool registry: kind → tool. The engine asks it for a kind; nothing switches on kind names."""

from __future__ import annotations

from collections.abc import Iterable

from noetl_cloud.engine.outcome import Tool
from noetl_cloud.errors import NotFound


class UnknownTool(NotFound):
    """No tool is registered for a task's kind."""

    code = "unknown_tool"


class ToolRegistry:
    """Tools by kind. Register with :meth:`register`; the engine calls :meth:`get`."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add ``tool`` under ``tool.kind``; a kind registered twice is an error unless ``replace``."""
        if tool.kind in self._tools and not replace:
            raise ValueError(f"tool kind '{tool.kind}' is already registered")
        self._tools[tool.kind] = tool

    def get(self, kind: str) -> Tool:
        """The tool of ``kind``; :class:`UnknownTool` if none is registered."""
        try:
            return self._tools[kind]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownTool(f"no tool of kind '{kind}' (registered: {known})") from None

    def kinds(self) -> list[str]:
        """The registered kinds, sorted."""
        return sorted(self._tools)


def default_registry(*, http_allow: Iterable[str] = ()) -> ToolRegistry:
    """The built-in tools: noop, python, http, playbook, postgres, subscription (pools and source
    clients open on first use, not here). ``http_allow`` is ``NOETL_HTTP_TOOL_ALLOW``: what http tasks
    may reach besides public addresses."""
    from noetl_cloud.tools.egress import EgressPolicy
    from noetl_cloud.tools.http import HttpTool
    from noetl_cloud.tools.noop import NoopTool
    from noetl_cloud.tools.playbook import PlaybookTool
    from noetl_cloud.tools.postgres import PostgresTool
    from noetl_cloud.tools.python import PythonTool
    from noetl_cloud.tools.subscription import SubscriptionTool

    http = HttpTool(egress=EgressPolicy.from_allowlist(http_allow))
    return ToolRegistry([NoopTool(), PythonTool(), http, PlaybookTool(), PostgresTool(), SubscriptionTool()])
