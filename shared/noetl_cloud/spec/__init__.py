"""Catalog documents: ``kind: Playbook`` (DSL v2) and ``kind: Subscription`` (the listener RFC).

:func:`parse_document` turns the YAML text of one document into its validated model. Every
problem, from bad YAML to a broken rule, is a :class:`~noetl_cloud.errors.ValidationFailed`
(HTTP 422) whose ``details`` list ``{"field", "problem", "type"}`` with a dotted path to the field.
Checks across documents (a playbook that a subscription targets exists, a gateway path is unique)
are the catalog service's.

The names load on first use (PEP 562): a role that imports one module of this package (the ingress's
spool needs ``spec.subscription``) does not pay for building every model at its cold start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from noetl_cloud.spec.documents import KINDS, Document, parse_document, validate_document
    from noetl_cloud.spec.playbook import PlaybookDoc
    from noetl_cloud.spec.subscription import SubscriptionDoc

_WHERE = {
    "KINDS": "documents",
    "Document": "documents",
    "parse_document": "documents",
    "validate_document": "documents",
    "PlaybookDoc": "playbook",
    "SubscriptionDoc": "subscription",
}

__all__ = ["KINDS", "Document", "PlaybookDoc", "SubscriptionDoc", "parse_document", "validate_document"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
