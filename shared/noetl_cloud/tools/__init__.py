"""Tool kinds of DSL v2 (§5): one small module per kind, found through :mod:`noetl_cloud.tools.registry`."""

from noetl_cloud.tools.registry import ToolRegistry, UnknownTool, default_registry

__all__ = ["ToolRegistry", "UnknownTool", "default_registry"]
