"""One catalog document of either kind: parse its YAML text, or validate a decoded mapping."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import ValidationError

from noetl_cloud.errors import ValidationFailed
from noetl_cloud.spec.common import load_yaml, problem, problem_details
from noetl_cloud.spec.playbook import PlaybookDoc
from noetl_cloud.spec.subscription import SubscriptionDoc

Document: TypeAlias = PlaybookDoc | SubscriptionDoc

KINDS: dict[str, type[PlaybookDoc] | type[SubscriptionDoc]] = {
    "Playbook": PlaybookDoc,
    "Subscription": SubscriptionDoc,
}


def parse_document(text: str) -> Document:
    """Parse YAML text of one catalog document (kind: Playbook or kind: Subscription) and validate it.

    Raises :class:`ValidationFailed` (422, ``validation_failed``) whose ``details`` is a list of
    ``{"field": "<dotted path>", "problem": "<message>", "type": "<error type>"}``. Bad YAML and a
    document that is not a mapping are reported at field ``$``; a missing or unknown kind at ``kind``.
    Messages never echo the rejected values.
    """
    return validate_document(load_yaml(text))


def validate_document(data: Any) -> Document:
    """Validate an already decoded document (a JSON body, say) the way :func:`parse_document` does."""
    if not isinstance(data, dict):
        raise ValidationFailed(
            "document must be a mapping",
            details=[problem("$", "a catalog document is a mapping with a kind", "not_a_mapping")],
        )
    kind = data.get("kind")
    if kind is None:
        raise ValidationFailed("document has no kind", details=[problem("kind", "kind is required", "missing")])
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        message = f"kind must be one of {', '.join(KINDS)}"
        raise ValidationFailed("unknown document kind", details=[problem("kind", message, "unknown_kind")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"{kind} document failed validation", details=problem_details(exc)) from None
