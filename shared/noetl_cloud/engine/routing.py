"""The decisions around a step run, shared by the in-process runner and the distributed orchestrator:
admission (§4.2), the loop collection (§7.1) and routing on a terminal event (§8).

Each is a pure function of the compiled step, a template scope and the renderer; none emits events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl_cloud.engine.model import StepPlan
from noetl_cloud.engine.payloads import PayloadStore
from noetl_cloud.engine.templates import Renderer, TemplateFailure

SUCCESS_EVENTS = ("step.done", "loop.done")


@dataclass(frozen=True)
class Selected:
    """One fired arc: its index in ``next.arcs``, the target step and the rendered args (the next token)."""

    arc: int
    step: str
    args: dict[str, Any]

    def event_payload(self, source: str, on: str) -> dict[str, Any]:
        """The payload of the ``next.selected`` event for this arc."""
        return {"from": source, "to": self.step, "arc": self.arc, "on": on, "args": self.args}


def admit(renderer: Renderer, plan: StepPlan, scope: dict[str, Any]) -> tuple[bool, int | None]:
    """§4.2: the first matching rule decides; no rule (or no match) admits. Raises :class:`TemplateFailure`."""
    for index, rule in enumerate(plan.admit):
        if rule.when is None or renderer.truth(rule.when, scope, step=plan.name):
            return rule.allow, index
    return True, None


def collection(
    renderer: Renderer, plan: StepPlan, scope: dict[str, Any], payloads: PayloadStore | None = None
) -> list[Any]:
    """§7.1: the loop's ``in`` rendered to a list (a mapping becomes its items; a reference is resolved)."""
    assert plan.loop is not None
    value = renderer.render(plan.loop.items, scope, step=plan.name)
    if isinstance(value, dict) and isinstance(value.get("reference"), dict) and payloads is not None:
        value = payloads.resolve(value["reference"])
    if isinstance(value, dict):
        value = list(value.items())
    if not isinstance(value, list | tuple):
        raise TemplateFailure(
            f"loop.in must be a list, got {type(value).__name__}", expression=str(plan.loop.items), step=plan.name
        )
    return list(value)


def route(renderer: Renderer, plan: StepPlan, event: dict[str, Any], scope: dict[str, Any]) -> list[Selected]:
    """§8: exclusive (first match) or inclusive (every match) arcs. An arc without ``when`` fires on success.

    ``event`` is ``{name, step, status, result, error}``; ``scope`` must already hold it as ``event``.
    """
    router = plan.step.next
    if router is None:
        return []
    selected: list[Selected] = []
    for index, arc in enumerate(router.arcs):
        if arc.when is None:
            matched = event["name"] in SUCCESS_EVENTS
        else:
            matched = renderer.truth(arc.when, scope, step=plan.name)
        if not matched:
            continue
        selected.append(Selected(index, arc.step, renderer.render(arc.args or {}, scope, step=plan.name)))
        if router.spec.mode == "exclusive":
            break
    return selected


def template_error(exc: TemplateFailure) -> dict[str, Any]:
    """The ``error`` of a step that failed on a template."""
    return {"kind": exc.code, "message": exc.message, "expression": exc.expression, "step": exc.step}
