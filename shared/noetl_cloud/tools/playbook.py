"""``kind: playbook``: run a child playbook (``path``) with ``args`` as its workload overrides.

The engine injects how a child runs (:attr:`ToolCall.run_child`); without it the task is an error outcome.
The child's outcome result is ``{execution_id, status, ctx, results}``.
"""

from __future__ import annotations

from noetl_cloud.engine.outcome import Outcome, ToolCall


class PlaybookTool:
    """Runs a child execution through the engine's ``run_child`` callback."""

    kind = "playbook"
    raw_fields: tuple[str, ...] = ()

    def run(self, call: ToolCall) -> Outcome:
        """Run the child named by ``config['path']``."""
        path = call.config.get("path")
        args = call.config.get("args") or {}
        if not isinstance(path, str) or not isinstance(args, dict):
            return Outcome.fail("bad_task", "a playbook task needs `path` (text) and optional `args` (a mapping)")
        if call.run_child is None:
            return Outcome.fail("unsupported", "this runner cannot start child playbooks")
        return call.run_child(path, args)
