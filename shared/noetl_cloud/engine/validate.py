"""Registration-time validation of a playbook: what the engine would refuse at run time, refused
when the playbook is registered instead (DSL v2 §12: errors at registration, not at run time).

On top of the document model (root sections, step names, arc targets, non-canonical constructs)
this checks what only the engine knows: task policies, jump labels, loops, admission rules, and
the syntax of every template, each error naming its field path. The optional root sections this
runtime does not implement (``executor``, ``workbook``: §1.1) are refused with the reason and what to
write instead, rather than accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jinja2 import TemplateSyntaxError

from noetl_cloud.engine.model import compile_playbook
from noetl_cloud.engine.templates import _environment, is_template
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.spec.playbook import PlaybookDoc
from noetl_cloud.tools.registry import default_registry

#: Root sections the document model accepts (§1.1) that this runtime does not implement, with why.
UNSUPPORTED_SECTIONS = {
    "executor": "`executor` is not supported by this runtime, so it would be ignored: where a playbook runs "
    "is chosen by how it is started (`noetl-cloud run` in this process, `POST /api/execute` distributed) "
    "and its pool by the request's `execution_pool` (or a subscription's dispatch.execution_pool); "
    "remove the section",
    "workbook": "`workbook` is not supported by this runtime, so its tasks would never run: write each task "
    "in the step's `tool` pipeline, and a task several steps share as a child playbook (`kind: playbook`); "
    "remove the section",
}


def validate_playbook(doc: PlaybookDoc) -> None:
    """Raise :class:`ValidationFailed` naming every problem the engine would hit."""
    problems: list[dict[str, str]] = [
        {"field": name, "problem": message, "type": "unsupported_section"}
        for name, message in UNSUPPORTED_SECTIONS.items()
        if _holds_something(getattr(doc, name))
    ]
    if problems:
        raise ValidationFailed("Playbook document failed validation", details=problems)
    compile_playbook(doc)
    raw = _raw_fields()
    env = _environment()
    for path, text in _templates(doc.model_dump(mode="json", by_alias=True, exclude_none=True), "", raw):
        try:
            env.parse(text)
        except TemplateSyntaxError as exc:
            problems.append(
                {
                    "field": path,
                    "problem": f"template syntax error: {exc.message} (line {exc.lineno})",
                    "type": "template_syntax",
                }
            )
    if problems:
        raise ValidationFailed("Playbook document failed validation", details=problems)


def _holds_something(value: Any) -> bool:
    """Whether a section says anything: ``workbook: {tasks: {}}`` (the spec's own example) does not."""
    if isinstance(value, dict):
        return any(_holds_something(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_something(item) for item in value)
    return value is not None and value != ""


def _raw_fields() -> frozenset[str]:
    registry = default_registry()
    return frozenset(field for kind in registry.kinds() for field in registry.get(kind).raw_fields)


def _templates(value: Any, path: str, raw: frozenset[str]) -> Iterator[tuple[str, str]]:
    """Every template string in a document, with its dotted path; tool fields that are not
    templates (python ``code``, SQL) are skipped."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in raw and isinstance(item, str):
                continue
            yield from _templates(item, f"{path}.{key}" if path else str(key), raw)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _templates(item, f"{path}.{index}", raw)
    elif isinstance(value, str) and is_template(value):
        yield path, value
