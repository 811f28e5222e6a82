"""An OpenAPI 3.1 document from a Flask app's URL map and a registry of its operations' models.

Every route of the app must have an :class:`Operation` in the role's :class:`RoleContract` (keyed by
endpoint name and method), and every operation in the contract must be a route: a route added without
its contract, or a contract left behind by a removed route, fails generation (and so the docs test).
Schemas are the pydantic models' own JSON Schemas (2020-12, the dialect of OpenAPI 3.1), under
``components/schemas``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from noetl_cloud.spec.common import LISTENER_NAME

OPENAPI_VERSION = "3.1.0"
_PARAM = re.compile(r"<(?:(?P<converter>\w+)(?:\([^)]*\))?:)?(?P<name>\w+)>")
_REF = "#/components/schemas/{model}"
_CONVERTERS: Mapping[str, dict[str, Any]] = {
    "int": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
    "listener": {"type": "string", "pattern": f"^{LISTENER_NAME}$"},
    "path": {"type": "string", "minLength": 1},
    "default": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
}


class ErrorDetail(BaseModel):
    """The error of every 4xx/5xx answer: a stable code, a message, optional details."""

    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    """The JSON error model of every role: ``{"error": {"code", "message", "details"?}}``."""

    error: ErrorDetail


@dataclass(frozen=True)
class Query:
    """One query parameter."""

    name: str
    schema: Mapping[str, Any]
    required: bool = False
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """What one route takes and answers. ``body`` is a JSON request body (``body_required`` or not);
    ``raw_body`` a body of any bytes (a webhook, a YAML document) besides or instead of it. ``answers``
    maps each success status to its model (``None``: a JSON object), ``text`` marks a text answer;
    ``errors`` are the error statuses the route documents (every one in the JSON error model)."""

    summary: str
    body: type[BaseModel] | None = None
    body_required: bool = True
    raw_body: str | None = None
    query: tuple[Query, ...] = ()
    answers: Mapping[int, type[BaseModel] | None] = field(default_factory=lambda: {200: None})
    text: bool = False
    errors: tuple[int, ...] = ()
    secured: bool | None = None  # None: as the role's prefixes say


@dataclass(frozen=True)
class RoleContract:
    """A role's API: its description, what its authentication covers, and its operations by
    ``(endpoint, METHOD)``. ``pages`` names the blueprints that serve pages, not API (the console):
    their routes are left out of the document."""

    title: str
    description: str
    operations: Mapping[tuple[str, str], Operation]
    secured_prefixes: tuple[str, ...] = ()
    security: tuple[str, ...] = ("bearer",)
    pages: tuple[str, ...] = ()


class ContractMismatch(ValueError):
    """The app's routes and the role's contract disagree."""


def path_of(rule: str) -> tuple[str, list[dict[str, Any]]]:
    """The OpenAPI path of a werkzeug rule and its path parameters."""
    params = [
        {"name": m["name"], "in": "path", "required": True, "schema": dict(_CONVERTERS[m["converter"] or "default"])}
        for m in _PARAM.finditer(rule)
    ]
    return _PARAM.sub(lambda m: "{" + m["name"] + "}", rule), params


def _secured(path: str, contract: RoleContract, operation: Operation) -> bool:
    if operation.secured is not None:
        return operation.secured
    return any(path == p.rstrip("/") or path.startswith(p) for p in contract.secured_prefixes)


def build_document(app: Flask, role: str, contract: RoleContract, schemes: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (the ``role``) described by ``contract``."""
    routes = sorted(
        ((rule.rule, method, rule.endpoint) for rule in app.url_map.iter_rules() for method in rule.methods or ()),
        key=lambda r: (r[0], r[1]),
    )
    routes = [
        r
        for r in routes
        if r[1] not in ("HEAD", "OPTIONS") and r[2] != "static" and r[2].split(".")[0] not in contract.pages
    ]
    seen = {(endpoint, method) for _, method, endpoint in routes}
    missing = sorted(f"{m} {e}" for e, m in seen - set(contract.operations))
    stale = sorted(f"{m} {e}" for e, m in set(contract.operations) - seen)
    if missing or stale:
        raise ContractMismatch(f"{role}: routes without a contract {missing}; contracts without a route {stale}")
    schemas, refs = _schemas(contract.operations.values())
    paths: dict[str, dict[str, Any]] = {}
    for rule, method, endpoint in routes:
        path, params = path_of(rule)
        operation = contract.operations[(endpoint, method)]
        secured = _secured(rule, contract, operation)
        operation_id = f"{role}.{endpoint}.{method.lower()}"
        paths.setdefault(path, {})[method.lower()] = _operation(
            operation_id, operation, params, refs, secured, contract
        )
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": contract.title, "version": "1", "description": contract.description},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {k: schemes[k] for k in contract.security}},
    }


def _schemas(operations: Iterable[Operation]) -> tuple[dict[str, Any], dict[type[BaseModel], dict[str, str]]]:
    models: set[type[BaseModel]] = {ErrorBody}
    for operation in operations:
        if operation.body is not None:
            models.add(operation.body)
        models.update(m for m in operation.answers.values() if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    mapping, top = models_json_schema([(m, "validation") for m in ordered], ref_template=_REF)
    refs = {model: dict(mapping[(model, "validation")]) for model in ordered}
    return dict(sorted(top.get("$defs", {}).items())), refs


def _operation(
    operation_id: str,
    operation: Operation,
    params: list[dict[str, Any]],
    refs: Mapping[type[BaseModel], dict[str, str]],
    secured: bool,
    contract: RoleContract,
) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": operation_id, "summary": operation.summary}
    parameters = params + [
        {"name": q.name, "in": "query", "required": q.required, "schema": dict(q.schema)}
        | ({"description": q.description} if q.description else {})
        for q in operation.query
    ]
    if parameters:
        out["parameters"] = parameters
    content: dict[str, Any] = {}
    if operation.body is not None:
        content["application/json"] = {"schema": refs[operation.body]}
    if operation.raw_body is not None:
        content[operation.raw_body] = {"schema": {}}
    if content:
        out["requestBody"] = {"required": operation.body_required, "content": content}
    responses: dict[str, Any] = {}
    for status, model in sorted(operation.answers.items()):
        if operation.text:
            body = {"text/plain": {"schema": {"type": "string"}}}
        else:
            body = {"application/json": {"schema": refs[model] if model is not None else {"type": "object"}}}
        responses[str(status)] = {"description": "success", "content": body}
    error = {"application/json": {"schema": refs[ErrorBody]}}
    statuses = set(operation.errors) | ({401, 403} if secured else set())
    for status in sorted(statuses):
        responses[str(status)] = {"description": "error", "content": error}
    responses["default"] = {"description": "an error in the JSON error model", "content": error}
    out["responses"] = responses
    if secured:
        out["security"] = [{name: []} for name in contract.security]
    return out
