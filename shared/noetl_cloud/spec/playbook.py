"""``kind: Playbook``: the DSL v2 document (dsl-v2-spec §1, §4, §8, §12).

The root and the step shape are strict: only the sections of §1.1 and the step keys of §4.1 are
accepted, and the non-canonical constructs of §12 are rejected with a message that names their
canonical replacement. What a step holds (``spec``, ``tool``, ``loop``, arc ``args``) is kept as
plain data here; the engine models it. ``next`` is the router of §8: its arcs must name steps of
this workflow.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from noetl_cloud.spec.common import ApiVersion, Metadata, SpecModel, raise_problems, rule

STEP_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
StepName = Annotated[str, StringConstraints(pattern=STEP_NAME, max_length=128)]

#: Root sections §1.1 forbids, with what to write instead.
ROOT_NON_CANONICAL = {
    "vars": "root-level `vars` is not part of DSL v2: move the values into `workload` (immutable inputs) "
    "or write them at run time with step-level `set_ctx` (a task policy's then.set_ctx)",
}

#: Step keys §12 lists as non-canonical, with their canonical replacement.
STEP_NON_CANONICAL = {
    "pipe": "`pipe` is not part of DSL v2: step.tool is always an ordered pipeline, list the tasks under `tool`",
    "eval": "legacy `eval` blocks are not part of DSL v2: map each outcome with the task's `spec.policy.rules` "
    "(when/then with do: continue|retry|jump|break|fail)",
    "expr": "`expr` is not a DSL v2 keyword: `when` is the only conditional keyword, on `next.arcs[].when` "
    "for routing or `spec.policy.admit.rules[].when` for admission",
    "when": "a top-level step `when` is not part of DSL v2: gate the step with `spec.policy.admit.rules` "
    "or guard the arc that leads to it with `next.arcs[].when`",
    "case": "step-level `case` is not part of DSL v2: route with `next.arcs` (a `when` per arc, "
    "next.spec.mode exclusive|inclusive) and handle outcomes with the tasks' `spec.policy.rules`",
}

#: Arc keys of older routers, with the canonical arc form.
ARC_NON_CANONICAL = {
    "expr": "`expr` is not a DSL v2 keyword: guard the arc with `when`",
    "then": "conditional `then` blocks are not part of DSL v2: write each target as its own arc "
    "(step, when, args) and choose first-match or fan-out with next.spec.mode",
}

#: Keys of a tool task that §12 lists as non-canonical.
TASK_NON_CANONICAL = ("eval", "pipe")


def _reject_keys(title: str, data: Any, table: dict[str, str]) -> None:
    if isinstance(data, dict):
        raise_problems(title, (rule((key,), "non_canonical", message) for key, message in table.items() if key in data))


class Arc(SpecModel):
    """One arc of ``next``: the step it leads to, its guard and its inscription (§8.2, §8.3)."""

    step: StepName
    when: str | bool | None = None
    args: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: Any) -> Any:
        _reject_keys("Arc", data, ARC_NON_CANONICAL)
        return data

    @field_validator("when", mode="wrap")
    @classmethod
    def _guard_shape(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("guard_shape", "when is a template expression (a string) or a boolean") from None


class NextSpec(SpecModel):
    """``next.spec``: first matching arc (exclusive, the default) or every matching arc (inclusive)."""

    mode: Literal["exclusive", "inclusive"] = "exclusive"
    policy: dict[str, Any] = Field(default_factory=dict)


class Next(SpecModel):
    """The router of a step (§8). A bare list of arcs is read as ``{arcs: [...]}``."""

    spec: NextSpec = Field(default_factory=NextSpec)
    arcs: list[Arc] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _arcs_shorthand(cls, data: Any) -> Any:
        return {"arcs": data} if isinstance(data, list) else data


class Step(SpecModel):
    """One step (§4.1): admission and knobs in ``spec``, an optional ``loop``, the ``tool`` pipeline and
    the ``next`` router. ``tool`` is one task (a mapping) or a pipeline (a list of tasks)."""

    step: StepName
    desc: str | None = None
    spec: dict[str, Any] | None = None
    loop: dict[str, Any] | None = None
    tool: dict[str, Any] | list[dict[str, Any]] | None = None
    next: Next | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: Any) -> Any:
        _reject_keys("Step", data, STEP_NON_CANONICAL)
        return data

    @field_validator("tool", mode="wrap")
    @classmethod
    def _tool_shape(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(
                "tool_shape", "tool is one task (a mapping) or a pipeline (a list of labeled tasks)"
            ) from None

    @model_validator(mode="after")
    def _canonical_tasks(self) -> Step:
        raise_problems("Step", _task_problems(self.tool))
        return self

    def targets(self) -> list[str]:
        """The steps this step's arcs lead to, in arc order."""
        return [arc.step for arc in self.next.arcs] if self.next else []


def _task_problems(tool: dict[str, Any] | list[dict[str, Any]] | None) -> list[InitErrorDetails]:
    """§12 keys inside tool tasks. A pipeline entry with one key whose value is a mapping is a labeled
    task (``- fetch: {kind: http}``), and the label itself may be any name."""
    if tool is None:
        return []
    tasks: list[tuple[tuple[str | int, ...], dict[str, Any]]]
    if isinstance(tool, dict):
        tasks = [(("tool",), tool)]
    else:
        tasks = []
        for index, entry in enumerate(tool):
            label, body = next(iter(entry.items()), ("", None))
            if len(entry) == 1 and isinstance(body, dict):
                tasks.append((("tool", index, label), body))
            else:
                tasks.append((("tool", index), entry))
    return [
        rule((*loc, key), "non_canonical", STEP_NON_CANONICAL[key])
        for loc, body in tasks
        for key in TASK_NON_CANONICAL
        if key in body
    ]


class PlaybookDoc(SpecModel):
    """A ``kind: Playbook`` catalog document (DSL v2). Only the root sections of §1.1 are accepted."""

    apiVersion: ApiVersion = "noetl.io/v2"
    kind: Literal["Playbook"]
    metadata: Metadata
    keychain: list[dict[str, Any]] = Field(default_factory=list)
    executor: dict[str, Any] | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    workflow: list[Step] = Field(min_length=1)
    workbook: dict[str, Any] | list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: Any) -> Any:
        _reject_keys("PlaybookDoc", data, ROOT_NON_CANONICAL)
        return data

    @model_validator(mode="after")
    def _routing(self) -> PlaybookDoc:
        problems: list[InitErrorDetails] = []
        first_use: dict[str, int] = {}
        for index, step in enumerate(self.workflow):
            if step.step in first_use:
                message = f"step name '{step.step}' is already used by workflow.{first_use[step.step]}"
                problems.append(rule(("workflow", index, "step"), "duplicate_step", message))
            else:
                first_use[step.step] = index
        for index, step in enumerate(self.workflow):
            for arc_index, target in enumerate(step.targets()):
                if target not in first_use:
                    message = f"arc leads to '{target}', which is not a step of this workflow"
                    problems.append(
                        rule(("workflow", index, "next", "arcs", arc_index, "step"), "unknown_step", message)
                    )
        raise_problems("PlaybookDoc", problems)
        return self

    @property
    def path(self) -> str:
        """The catalog path: ``metadata.path``, falling back to ``metadata.name``."""
        return self.metadata.catalog_path

    def step_names(self) -> list[str]:
        """Step names in workflow order."""
        return [step.step for step in self.workflow]

    def entry_step(self) -> str:
        """The step a run starts at: ``start`` if the workflow has one, else the first step."""
        names = self.step_names()
        return "start" if "start" in names else names[0]

    def step(self, name: str) -> Step:
        """The step called ``name``; :class:`KeyError` if there is none."""
        for step in self.workflow:
            if step.step == name:
                return step
        raise KeyError(name)
