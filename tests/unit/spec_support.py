"""Helpers of the catalog document tests: refusing a document and finding a problem by field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from noetl_cloud.errors import ValidationFailed
from noetl_cloud.spec import parse_document


def rejection(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The problems of a document that must be refused (422, validation_failed, well-formed details)."""
    with pytest.raises(ValidationFailed) as info:
        parse_document(yaml.safe_dump(doc, sort_keys=False))
    assert info.value.status == 422 and info.value.code == "validation_failed"
    details: list[dict[str, str]] = info.value.details
    assert details and all(set(d) == {"field", "problem", "type"} for d in details)
    return details


def problem_at(details: list[dict[str, str]], field: str) -> dict[str, str]:
    matches = [d for d in details if d["field"] == field]
    assert matches, f"no problem at {field}: {details}"
    return matches[0]
