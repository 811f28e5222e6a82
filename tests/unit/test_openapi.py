"""The OpenAPI documents of the roles (issue #21 item 9): generated from each app's routes and the pydantic
models, valid OpenAPI 3.1, committed under docs/openapi/ and equal to what the code generates now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from noetl_cloud.openapi import ContractMismatch, RoleContract, build_document, document_for
from noetl_cloud.openapi.contracts import CONTRACTS, SECURITY_SCHEMES
from noetl_cloud.openapi.roles import ROLES, documents, role_app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "openapi"


def test_the_committed_documents_are_what_the_code_generates() -> None:
    generated = documents()
    assert sorted(generated) == sorted(p.stem for p in DOCS.glob("*.json"))
    stale = [role for role, text in generated.items() if (DOCS / f"{role}.json").read_text(encoding="utf-8") != text]
    assert stale == [], f"regenerate with: python -m noetl_cloud.openapi docs/openapi ({stale})"


@pytest.mark.parametrize("role", ROLES)
def test_each_document_is_valid_openapi_3_1_and_covers_every_route(role: str) -> None:
    document = json.loads((DOCS / f"{role}.json").read_text(encoding="utf-8"))
    validate(document)
    assert document["openapi"] == "3.1.0"
    app = role_app(role)
    pages = CONTRACTS[role].pages  # blueprints serving pages (the console), not API
    routes = {rule.rule for rule in app.url_map.iter_rules() if rule.endpoint.split(".")[0] not in pages}
    assert len(routes) == len(document["paths"])
    assert "/api/openapi.json" in document["paths"]
    for path in document["paths"].values():
        for operation in path.values():
            assert operation["responses"]["default"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }


def test_request_bodies_are_the_models_the_routes_validate_with() -> None:
    document = json.loads((DOCS / "execute.json").read_text(encoding="utf-8"))
    body = document["paths"]["/api/execute"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ExecuteRequest"}
    execute = document["components"]["schemas"]["ExecuteRequest"]
    assert execute["additionalProperties"] is False and "workload" in execute["properties"]
    ids = document["paths"]["/api/executions/{execution_id}"]["get"]["parameters"][0]["schema"]
    assert ids["maximum"] == 2**63 - 1
    assert document["paths"]["/api/execute"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in document["paths"]["/healthz"]["get"]


def test_a_route_without_a_contract_fails_generation() -> None:
    app = role_app("spool_drainer")
    app.add_url_rule("/drain/new", "new_route", lambda: {}, methods=["POST"])
    with pytest.raises(ContractMismatch, match="new_route"):
        build_document(app, "spool_drainer", CONTRACTS["spool_drainer"], SECURITY_SCHEMES)
    contract = CONTRACTS["spool_drainer"]
    extra = RoleContract(contract.title, contract.description, {**contract.operations, ("gone", "GET"): None})  # type: ignore[dict-item]
    with pytest.raises(ContractMismatch, match="gone"):
        build_document(role_app("spool_drainer"), "spool_drainer", extra, SECURITY_SCHEMES)


def test_a_role_serves_its_document_behind_its_authentication() -> None:
    from noetl_cloud.auth.internal import InternalAuth
    from noetl_cloud.settings import Settings

    settings = Settings(internal_api_token="t0ken-for-openapi")  # type: ignore[arg-type]
    from noetl_cloud.frames.app import build_app

    app = build_app(settings, None, InternalAuth.from_settings(settings))  # type: ignore[arg-type]
    client = app.test_client()
    assert client.get("/api/openapi.json").status_code == 401
    answer = client.get("/api/openapi.json", headers={"Authorization": "Bearer t0ken-for-openapi"})
    assert answer.status_code == 200
    assert answer.json == document_for(role_app("frames")) == json.loads((DOCS / "frames.json").read_text())
