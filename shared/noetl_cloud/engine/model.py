"""Typed views of the loosely typed parts of a step (``tool``, ``loop``, ``spec.policy``), built once per
playbook. Shape errors are :class:`~noetl_cloud.errors.ValidationFailed` with a dotted field path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from noetl_cloud.errors import ValidationFailed
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.spec.playbook import PlaybookDoc, Step

Directive = Literal["continue", "retry", "jump", "break", "fail"]
DIRECTIVES: tuple[str, ...] = ("continue", "retry", "jump", "break", "fail")
BACKOFFS: tuple[str, ...] = ("none", "linear", "exponential")


@dataclass(frozen=True)
class Then:
    """``then`` of a task policy rule (§6.2). ``delay`` may be a template; it is rendered when used."""

    do: Directive = "continue"
    attempts: int = 1
    backoff: str = "none"
    delay: Any = 0.0
    to: str | None = None
    set_iter: dict[str, Any] | None = None
    set_ctx: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rule:
    """One policy rule; ``when is None`` marks the ``else`` rule."""

    when: Any
    then: Then


@dataclass(frozen=True)
class Task:
    """One labelled pipeline task (§5.1). ``rules is None`` means the §6.3 defaults apply."""

    label: str
    kind: str
    config: dict[str, Any]
    spec: dict[str, Any]
    rules: tuple[Rule, ...] | None


@dataclass(frozen=True)
class Loop:
    """``step.loop`` (§7). A ``cursor`` loop (docs/frames.md) has no ``items``: its ``cursor`` driver claims
    rows frame by frame, under ``frame`` (the :class:`~noetl_cloud.frames.policy.FramePolicy`)."""

    items: Any
    iterator: str
    mode: Literal["sequential", "parallel", "cursor"] = "sequential"
    max_in_flight: int | None = None
    cursor: dict[str, Any] | None = None
    frame: FramePolicy | None = None


@dataclass(frozen=True)
class AdmitRule:
    """One admission rule (§4.2); ``when is None`` marks ``else``."""

    when: Any
    allow: bool


@dataclass(frozen=True)
class StepPlan:
    """A step ready to run: admission, loop, pipeline and the router of the validated model."""

    step: Step
    tasks: tuple[Task, ...]
    loop: Loop | None
    admit: tuple[AdmitRule, ...]

    @property
    def name(self) -> str:
        """The step name."""
        return self.step.step


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(
        f"playbook cannot run: {field}: {message}",
        details=[{"field": field, "problem": message, "type": "engine_shape"}],
    )


def _mapping(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(field, "must be a mapping")
    return value


def _then(raw: Any, field: str) -> Then:
    body = _mapping(raw, field)
    do = body.get("do", "continue")
    if do not in DIRECTIVES:
        raise _invalid(f"{field}.do", f"must be one of {', '.join(DIRECTIVES)}")
    backoff = body.get("backoff", "none")
    if backoff not in BACKOFFS:
        raise _invalid(f"{field}.backoff", f"must be one of {', '.join(BACKOFFS)}")
    attempts = body.get("attempts", 3 if do == "retry" else 1)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise _invalid(f"{field}.attempts", "must be a positive integer")
    to = body.get("to")
    if do == "jump" and not isinstance(to, str):
        raise _invalid(f"{field}.to", "jump needs the label of a task of this pipeline")
    return Then(
        do=do,
        attempts=attempts,
        backoff=backoff,
        delay=body.get("delay", 0.0),
        to=to,
        set_iter=_mapping(body.get("set_iter"), f"{field}.set_iter") or None,
        set_ctx=_mapping(body.get("set_ctx"), f"{field}.set_ctx") or None,
    )


def _rules(policy: Any, field: str) -> tuple[Rule, ...] | None:
    if policy is None:
        return None
    raw_rules = _mapping(policy, field).get("rules")
    if raw_rules is None:
        return None
    if not isinstance(raw_rules, list):
        raise _invalid(f"{field}.rules", "must be a list")
    rules = []
    for index, raw in enumerate(raw_rules):
        where = f"{field}.rules.{index}"
        entry = _mapping(raw, where)
        if "else" in entry:
            rules.append(Rule(when=None, then=_then(_mapping(entry["else"], f"{where}.else").get("then"), where)))
        elif "when" in entry:
            rules.append(Rule(when=entry["when"], then=_then(entry.get("then"), f"{where}.then")))
        else:
            raise _invalid(where, "a rule has `when` and `then`, or `else`")
    return tuple(rules)


def _task(label: str, body: dict[str, Any], field: str) -> Task:
    kind = body.get("kind")
    if not isinstance(kind, str):
        raise _invalid(f"{field}.kind", "every task names its tool kind")
    spec = dict(_mapping(body.get("spec"), f"{field}.spec"))
    rules = _rules(spec.pop("policy", None), f"{field}.spec.policy")
    config = {key: value for key, value in body.items() if key not in ("kind", "spec")}
    return Task(label=label, kind=kind, config=config, spec=spec, rules=rules)


def _tasks(step: Step) -> tuple[Task, ...]:
    field = f"{step.step}.tool"
    if step.tool is None:
        return ()
    if isinstance(step.tool, dict):
        return (_task(step.step, step.tool, field),)
    tasks = []
    for index, entry in enumerate(step.tool):
        label, body = next(iter(entry.items()), ("", None))
        if len(entry) == 1 and isinstance(body, dict):
            tasks.append(_task(label, body, f"{field}.{index}.{label}"))
        else:
            tasks.append(_task(f"task_{index}", entry, f"{field}.{index}"))
    labels = [task.label for task in tasks]
    for task in tasks:
        if labels.count(task.label) > 1:
            raise _invalid(field, f"task label '{task.label}' is used twice")
        for rule in task.rules or ():
            if rule.then.do == "jump" and rule.then.to not in labels:
                raise _invalid(f"{field}.{task.label}", f"jump to '{rule.then.to}', which is not a task of this step")
    return tuple(tasks)


def _loop(step: Step) -> Loop | None:
    if step.loop is None:
        return None
    field = f"{step.step}.loop"
    spec = _mapping(step.loop.get("spec"), f"{field}.spec")
    if spec.get("mode") == "cursor":
        return _cursor_loop(step, spec, spec.get("max_in_flight"))
    if "in" not in step.loop or not isinstance(step.loop.get("iterator"), str):
        raise _invalid(field, "a loop needs `in` (a collection) and `iterator` (a name)")
    mode = spec.get("mode", "sequential")
    if mode not in ("sequential", "parallel", "cursor"):
        raise _invalid(f"{field}.spec.mode", "must be sequential or parallel (or cursor, docs/frames.md)")
    limit = spec.get("max_in_flight")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _invalid(f"{field}.spec.max_in_flight", "must be a positive integer")
    return Loop(items=step.loop["in"], iterator=step.loop["iterator"], mode=mode, max_in_flight=limit)


def _cursor_loop(step: Step, spec: dict[str, Any], limit: Any) -> Loop:
    """``mode: cursor``: a ``cursor`` driver (``kind: postgres`` with its ``claim`` SQL) and ``spec.frame``."""
    assert step.loop is not None
    field = f"{step.step}.loop"
    iterator = step.loop.get("iterator")
    if not isinstance(iterator, str) or not iterator:
        raise _invalid(field, "a cursor loop needs `iterator` (a name)")
    cursor = _mapping(step.loop.get("cursor"), f"{field}.cursor")
    if cursor.get("kind") != "postgres":
        raise _invalid(f"{field}.cursor.kind", "the cursor driver must be postgres")
    if not isinstance(cursor.get("claim"), str) or not cursor["claim"].strip():
        raise _invalid(f"{field}.cursor.claim", "the cursor needs the SQL that claims its next rows")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _invalid(f"{field}.spec.max_in_flight", "must be a positive integer")
    raw = _mapping(spec.get("frame", spec.get("frame_policy")), f"{field}.spec.frame")
    try:
        frame = FramePolicy.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _invalid(f"{field}.spec.frame{'.' + where if where else ''}", first["msg"]) from None
    release = cursor.get("release")
    if release is not None and (not isinstance(release, str) or not release.strip()):
        raise _invalid(f"{field}.cursor.release", "must be the SQL that gives a frame's untaken rows back")
    bounds = sorted({"max_seconds", "max_bytes"} & set(raw))
    if bounds and release is None:
        raise _invalid(
            f"{field}.spec.frame.{bounds[0]}",
            "a frame bound needs `cursor.release`, the SQL that gives the rows a bounded frame did not take back "
            "to the cursor (docs/frames.md, Frame bounds)",
        )
    return Loop(
        items=None, iterator=iterator, mode="cursor", max_in_flight=limit or 1, cursor=dict(cursor), frame=frame
    )


def _admit(step: Step) -> tuple[AdmitRule, ...]:
    field = f"{step.step}.spec.policy.admit"
    policy = _mapping(_mapping(step.spec, f"{step.step}.spec").get("policy"), f"{step.step}.spec.policy")
    raw_rules = _mapping(policy.get("admit"), field).get("rules") or []
    rules = []
    for index, raw in enumerate(raw_rules):
        entry = _mapping(raw, f"{field}.rules.{index}")
        if "else" in entry:
            when, then = None, _mapping(_mapping(entry["else"], f"{field}.rules.{index}.else").get("then"), field)
        else:
            when, then = entry.get("when", True), _mapping(entry.get("then"), f"{field}.rules.{index}.then")
        rules.append(AdmitRule(when=when, allow=bool(then.get("allow", True))))
    return tuple(rules)


def compile_playbook(doc: PlaybookDoc) -> dict[str, StepPlan]:
    """Every step of ``doc`` as a :class:`StepPlan`, keyed by name."""
    return {
        step.step: StepPlan(step=step, tasks=_tasks(step), loop=_loop(step), admit=_admit(step))
        for step in doc.workflow
    }
