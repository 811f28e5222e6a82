"""``kind: Playbook``: the DSL v2 document (dsl-v2-spec §1, §4, §8, §12).

The root and the step shape are strict: only the sections of §1.1 and the step keys of §4.1 are
accepted, and the non-canonical constructs of §12 are rejected with a message that names their
canonical replacement. What a step holds (``spec``, ``tool``, ``loop``, arc ``args``) is kept as
plain data here; the engine models it. ``next`` is the router of §8: its arcs must name steps of
this workflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

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

#: The root sections of §1.1, the step keys of §4.1 and the arc keys of §8.2.
ROOT_SECTIONS = ("apiVersion", "kind", "metadata", "keychain", "executor", "workload", "workflow", "workbook")
STEP_KEYS = ("step", "desc", "spec", "loop", "tool", "next")
ARC_KEYS = ("step", "when", "args")

#: Keys of a tool task that §12 lists as non-canonical.
TASK_NON_CANONICAL = ("eval", "pipe")


def _again(error: ErrorDetails) -> InitErrorDetails:
    """A problem pydantic found, carried over into a combined error (its message kept as written)."""
    message = error["msg"].replace("{", "(").replace("}", ")")  # a template: keep braces out
    return InitErrorDetails(type=PydanticCustomError(error["type"], message), loc=error["loc"], input=None)


def _strict_keys(
    title: str,
    data: Any,
    handler: ValidatorFunctionWrapHandler,
    *,
    known: tuple[str, ...],
    legacy: dict[str, str],
    what: str,
    after: Callable[[dict[str, Any]], list[InitErrorDetails]] | None = None,
) -> Any:
    """Validate ``data`` and report, in one error, its legacy keys (with their canonical form), its unknown
    keys (with the keys ``what`` has) and what the model itself finds in the rest, so one answer lists
    every problem rather than the first kind found. ``after`` runs the model's "after" checks on the raw
    data when a field fails (they do not run then), for the problems at places not reported yet."""
    if not isinstance(data, dict):
        return handler(data)
    own = [rule((key,), "non_canonical", message) for key, message in legacy.items() if key in data]
    own += [
        rule((key,), "unknown_key", f"`{key}` is not {what}: it has {', '.join(known)}")
        for key in data
        if isinstance(key, str) and key not in known and key not in legacy
    ]
    try:
        value = handler({key: item for key, item in data.items() if key in known} if own else data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        seen = {tuple(error["loc"]) for error in errors}
        more = [found for found in (after(data) if after else []) if tuple(found["loc"]) not in seen]
        if not own and not more:
            raise
        raise_problems(title, [*own, *(_again(error) for error in errors), *more])
    raise_problems(title, own)
    return value


class Arc(SpecModel):
    """One arc of ``next``: the step it leads to, its guard and its inscription (§8.2, §8.3)."""

    step: StepName
    when: str | bool | None = None
    args: dict[str, Any] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _canonical(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _strict_keys("Arc", data, handler, known=ARC_KEYS, legacy=ARC_NON_CANONICAL, what="an arc key (§8.2)")

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

    # Defined after the "after" validator so that it wraps it: one answer lists every problem.
    @model_validator(mode="wrap")
    @classmethod
    def _canonical(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _strict_keys(
            "Step",
            data,
            handler,
            known=STEP_KEYS,
            legacy=STEP_NON_CANONICAL,
            what="a step key (§4.1)",
            after=lambda raw: _task_problems(_raw_tool(raw.get("tool"))),
        )

    def targets(self) -> list[str]:
        """The steps this step's arcs lead to, in arc order."""
        return [arc.step for arc in self.next.arcs] if self.next else []


def _raw_tool(tool: Any) -> dict[str, Any] | list[dict[str, Any]] | None:
    """A tool that did not validate, when it has the shape :func:`_task_problems` reads."""
    if isinstance(tool, dict) or (isinstance(tool, list) and all(isinstance(entry, dict) for entry in tool)):
        return tool
    return None


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


def _routing_problems(routes: list[tuple[str, list[str]] | None]) -> list[InitErrorDetails]:
    """Duplicate step names (at their second use) and arcs to steps the workflow lacks; ``routes`` holds
    each step's name and arc targets in workflow order (``None`` for an entry that is not a step)."""
    problems: list[InitErrorDetails] = []
    first_use: dict[str, int] = {}
    for index, route in enumerate(routes):
        if route is None:
            continue
        if route[0] in first_use:
            message = f"step name '{route[0]}' is already used by workflow.{first_use[route[0]]}"
            problems.append(rule(("workflow", index, "step"), "duplicate_step", message))
        else:
            first_use[route[0]] = index
    for index, route in enumerate(routes):
        for arc_index, target in enumerate(route[1] if route else []):
            if target not in first_use:
                message = f"arc leads to '{target}', which is not a step of this workflow"
                problems.append(rule(("workflow", index, "next", "arcs", arc_index, "step"), "unknown_step", message))
    return problems


def _raw_routes(data: Any) -> list[tuple[str, list[str]] | None]:
    """The names and arc targets of a workflow that did not validate, as far as they can be read."""
    steps = data.get("workflow") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return []
    routes: list[tuple[str, list[str]] | None] = []
    for entry in steps:
        name = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            routes.append(None)
            continue
        router = entry.get("next")
        arcs = router.get("arcs") if isinstance(router, dict) else router
        targets = (
            [arc["step"] for arc in arcs if isinstance(arc, dict) and isinstance(arc.get("step"), str)]
            if isinstance(arcs, list)
            else []
        )
        routes.append((name, targets))
    return routes


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

    @model_validator(mode="after")
    def _routing(self) -> PlaybookDoc:
        raise_problems("PlaybookDoc", _routing_problems([(step.step, step.targets()) for step in self.workflow]))
        return self

    # Defined after the "after" validator so that it wraps it: one answer lists every problem.
    @model_validator(mode="wrap")
    @classmethod
    def _canonical(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _strict_keys(
            "PlaybookDoc",
            data,
            handler,
            known=ROOT_SECTIONS,
            legacy=ROOT_NON_CANONICAL,
            what="a DSL v2 root section (§1.1)",
            after=lambda raw: _routing_problems(_raw_routes(raw)),
        )

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
