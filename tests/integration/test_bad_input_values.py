"""Values PostgreSQL cannot store (NUL characters) are the caller's error: a JSON 400, not a 500."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.integration.control_fixtures import Topics, playbook, register


def test_a_nul_in_a_path_or_a_workload_is_a_400(client: FlaskClient, topics: Topics) -> None:
    register(client, playbook("domain/handle"))
    path = client.get("/api/catalog/a%00b")
    assert path.status_code in (400, 404) and path.get_json()["error"]["code"]
    body = client.post("/api/execute", json={"path": "domain/handle", "workload": {"k": "a\u0000b"}})
    assert body.status_code == 400 and body.get_json()["error"]["code"] == "invalid_value", body.get_json()
    fine = client.post("/api/execute", json={"path": "domain/handle", "workload": {"k": "ab"}})
    assert fine.status_code == 202
