"""OpenAPI 3.1 documents of the roles' HTTP APIs: generated from each Flask app's URL map and the
registry of request/response models (:mod:`noetl_cloud.openapi.contracts`), served by every role at
``GET /api/openapi.json`` behind the role's own authentication, committed under ``docs/openapi/``
(``python -m noetl_cloud.openapi docs/openapi`` rewrites them; a test compares)."""

from __future__ import annotations

from typing import Any

from flask import Flask

from noetl_cloud.openapi.generator import ContractMismatch, Operation, Query, RoleContract, build_document

__all__ = ["ContractMismatch", "Operation", "Query", "RoleContract", "build_document", "document_for"]


def document_for(app: Flask) -> dict[str, Any]:
    """The OpenAPI document of a role's app (``noetl_cloud.<role>``), built once per app."""
    cached = app.extensions.get("noetl_openapi")
    if cached is None:
        from noetl_cloud.openapi.contracts import CONTRACTS, SECURITY_SCHEMES

        role = app.name.removeprefix("noetl_cloud.")
        cached = app.extensions["noetl_openapi"] = build_document(app, role, CONTRACTS[role], SECURITY_SCHEMES)
    return dict(cached)
