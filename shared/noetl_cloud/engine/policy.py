"""Task policy (§6): map an outcome to a directive, and the retry backoff.

Rules are evaluated top to bottom against the outcome; the first whose ``when`` is true (or the ``else`` rule)
wins. With no policy the §6.3 defaults hold (ok → continue, error → fail); with rules but no match the
directive is ``continue``. ``set_iter`` / ``set_ctx`` of the chosen rule are rendered here, with ``outcome``
visible, and applied by the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_cloud.engine.model import Directive, Rule
from noetl_cloud.engine.templates import Renderer, TemplateFailure


@dataclass(frozen=True)
class Decision:
    """The directive chosen for one outcome, its rendered writes, and (for retry) its bounds."""

    do: Directive
    rule_index: int | None = None
    attempts: int = 1
    backoff: str = "none"
    delay: float = 0.0
    to: str | None = None
    set_iter: dict[str, Any] | None = None
    set_ctx: dict[str, Any] | None = None


def default_decision(status: str) -> Decision:
    """§6.3 without a policy: ok → continue, error → fail."""
    return Decision(do="continue" if status == "ok" else "fail")


def decide(
    rules: tuple[Rule, ...] | None,
    outcome_status: str,
    scope: Mapping[str, Any],
    renderer: Renderer,
    *,
    step: str,
    task: str,
) -> Decision:
    """The :class:`Decision` for an outcome. ``scope`` must already hold ``outcome`` and the pipeline locals.

    Raises :class:`TemplateFailure` when a guard, a delay or a write cannot be rendered.
    """
    if rules is None:
        return default_decision(outcome_status)
    for index, rule in enumerate(rules):
        if rule.when is not None and not renderer.truth(rule.when, scope, step=step, task=task):
            continue
        then = rule.then
        delay = renderer.render(then.delay, scope, step=step, task=task)
        try:
            seconds = float(delay)
        except (TypeError, ValueError):
            raise TemplateFailure(
                "retry delay is not a number of seconds", expression=str(then.delay), step=step, task=task
            ) from None
        return Decision(
            do=then.do,
            rule_index=index,
            attempts=then.attempts,
            backoff=then.backoff,
            delay=max(seconds, 0.0),
            to=then.to,
            set_iter=renderer.render(then.set_iter, scope, step=step, task=task) if then.set_iter else None,
            set_ctx=renderer.render(then.set_ctx, scope, step=step, task=task) if then.set_ctx else None,
        )
    return Decision(do="continue")


def backoff_delay(backoff: str, delay: float, retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first retry).

    ``none``: ``delay`` each time; ``linear``: ``delay * retry``; ``exponential``: ``delay * 2**(retry-1)``.
    """
    if retry < 1:
        raise ValueError("retries are counted from 1")
    if backoff == "linear":
        return delay * retry
    if backoff == "exponential":
        return delay * float(2 ** (retry - 1))
    return delay
