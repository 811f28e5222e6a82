"""Static reading of the Terraform under infra/ (python-hcl2): which values a ``for_each``/``count`` needs.

Terraform must know every ``for_each`` key and every ``count`` when it plans; a value that is an
attribute of a managed resource (an email, an id, a name read back from the API) is known only after
apply, and a plan over an empty project fails with "Invalid for_each argument". ``plan_unknown_uses``
follows each ``for_each``/``count`` of every module instance, through locals, module variables (to the
expression the caller passed, field by field) and module outputs, and reports every path that reaches a
managed resource, or a data source read in a module called with ``depends_on`` (Terraform defers those
reads to apply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

_REFERENCE = re.compile(
    r"(?<![\w.])(?:"
    r"(?P<var>var)\.(?P<var_path>\w+(?:\.\w+)*)"
    r"|(?P<local>local)\.(?P<local_path>\w+(?:\.\w+)*)"
    r"|module\.(?P<module>\w+)\.(?P<output>\w+)"
    r"|data\.(?P<data>\w+\.\w+)"
    r"|(?P<resource>(?:google_\w+|random_\w+|time_\w+|null_resource|terraform_data)\.\w+)"
    r")"
)


def clean(value: Any) -> Any:
    """python-hcl2 keeps the quotes of labels and string literals; drop them and its bookkeeping keys."""
    if isinstance(value, dict):
        return {unquote(k): clean(v) for k, v in value.items() if k not in ("__is_block__", "__comments__")}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, str):
        return unquote(value)
    return value


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


@cache
def parse(path: Path) -> dict[str, Any]:
    with path.open() as handle:
        parsed: dict[str, Any] = clean(hcl2.load(handle))
    return parsed


@dataclass(frozen=True)
class Folder:
    """Everything declared by the .tf files of one module folder."""

    path: Path
    locals: dict[str, Any]
    outputs: dict[str, Any]
    modules: dict[str, dict[str, Any]]
    # (address, expression) of every resource/module for_each and count of the folder.
    repetitions: list[tuple[str, Any]]


@cache
def folder(path: Path) -> Folder:
    local_values: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    modules: dict[str, dict[str, Any]] = {}
    repetitions: list[tuple[str, Any]] = []
    for tf in sorted(path.glob("*.tf")):
        doc = parse(tf)
        for block in doc.get("locals", []):
            local_values.update(block)
        for block in doc.get("output", []):
            outputs.update({name: body.get("value") for name, body in block.items()})
        for block in doc.get("module", []):
            modules.update(block)
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                for name, body in named.items():
                    for meta in ("for_each", "count"):
                        if meta in body:
                            repetitions.append((f"{rtype}.{name} ({meta})", body[meta]))
    for name, body in modules.items():
        for meta in ("for_each", "count"):
            if meta in body:
                repetitions.append((f"module.{name} ({meta})", body[meta]))
    return Folder(path, local_values, outputs, modules, repetitions)


@dataclass(frozen=True)
class Instance:
    """One module instance: its folder, the arguments its caller passed, and where it sits."""

    path: Path
    address: str
    arguments: dict[str, Any] = field(default_factory=dict)
    caller: Instance | None = None
    deferred_data: bool = False  # called (directly or through an ancestor) with depends_on


def instances(root: Path) -> list[Instance]:
    """The root module at ``root`` and every module instance below it."""
    found: list[Instance] = []

    def walk(instance: Instance) -> None:
        found.append(instance)
        for child in instances_below(instance):
            walk(child)

    walk(Instance(path=root.resolve(), address=""))
    return found


def _descend(value: Any, path: list[str]) -> Any:
    """The part of an object literal a dotted reference names, as far as the literal goes."""
    for step in path:
        if isinstance(value, dict) and step in value:
            value = value[step]
        else:
            break
    return value


def unknown_at_plan(expression: Any, instance: Instance, _seen: frozenset[str] = frozenset()) -> list[str]:
    """The chains by which ``expression`` (evaluated in ``instance``) reaches a value known only after apply."""
    text = str(expression)
    chains: list[str] = []
    here = instance.address or "root"
    for match in _REFERENCE.finditer(text):
        token = match.group(0)
        key = f"{here}:{token}"
        if key in _seen:
            continue
        seen = _seen | {key}
        if match.group("var"):
            name, *rest = match.group("var_path").split(".")
            if instance.caller is None or name not in instance.arguments:
                continue  # a root variable (tfvars) or a default: known at plan
            passed = _descend(instance.arguments[name], rest)
            chains += [f"{here}:{token} <- {c}" for c in unknown_at_plan(passed, instance.caller, seen)]
        elif match.group("local"):
            name, *rest = match.group("local_path").split(".")
            value = folder(instance.path).locals.get(name)
            chains += [f"{here}:{token} <- {c}" for c in unknown_at_plan(_descend(value, rest), instance, seen)]
        elif match.group("module"):
            call = folder(instance.path).modules.get(match.group("module"))
            if call is None:
                continue
            child = next(i for i in instances_below(instance) if i.address.endswith(f"module.{match.group('module')}"))
            value = folder(child.path).outputs.get(match.group("output"))
            chains += [f"{here}:{token} <- {c}" for c in unknown_at_plan(value, child, seen)]
        elif match.group("data"):
            if instance.deferred_data:
                chains.append(f"{here}:data.{match.group('data')} (read at apply: module called with depends_on)")
        elif match.group("resource"):
            chains.append(f"{here}:{token} (a managed resource)")
    return chains


def instances_below(instance: Instance) -> list[Instance]:
    """The direct children of ``instance``."""
    result = []
    for name, call in folder(instance.path).modules.items():
        result.append(
            Instance(
                path=(instance.path / call["source"]).resolve(),
                address=f"{instance.address}.module.{name}".lstrip("."),
                arguments=call,
                caller=instance,
                deferred_data=instance.deferred_data or bool(call.get("depends_on")),
            )
        )
    return result


def plan_unknown_uses(root: Path) -> list[str]:
    """Every for_each/count under the root module at ``root`` that needs a value known only after apply."""
    problems = []
    for instance in instances(root):
        for address, expression in folder(instance.path).repetitions:
            for chain in unknown_at_plan(expression, instance):
                problems.append(f"{instance.address or 'root'}: {address}: {chain}")
    return problems
