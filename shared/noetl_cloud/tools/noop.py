"""``kind: noop``: does nothing; its result is its rendered ``result`` field (``None`` if absent)."""

from __future__ import annotations

from noetl_cloud.engine.outcome import Outcome, ToolCall


class NoopTool:
    """A task that only carries policy (set_iter, set_ctx, jump, break) or passes a value along."""

    kind = "noop"
    raw_fields: tuple[str, ...] = ()

    def run(self, call: ToolCall) -> Outcome:
        """Always ok, with ``config['result']`` as the result."""
        return Outcome.ok(call.config.get("result"))
