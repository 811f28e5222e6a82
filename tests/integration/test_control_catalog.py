"""Catalog registration and the subscription rules checked at registration time."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from noetl_cloud.control.bootstrap import ControlPlane
from tests.integration.control_fixtures import playbook, register

PUSH = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {{name: {name}, path: subscriptions/{name}}}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/{listener}
    verify: {verify}
  dispatch: {{playbook: {playbook}, payload_from: message.json{pool}}}
  headers:
    directives: {directives}
  spool: {spool}
"""

HMAC = "{type: hmac_sha256, header: x-signature, secret: gh_webhook}"


def push(
    name: str = "hooks",
    *,
    listener: str = "hooks",
    verify: str = HMAC,
    target: str = "domain/handle",
    pool: str | None = None,
    directives: str = "[]",
    spool: str = "{mode: off}",
) -> str:
    return PUSH.format(
        name=name,
        listener=listener,
        verify=verify,
        playbook=target,
        pool=f", execution_pool: {pool}" if pool else "",
        directives=directives,
        spool=spool,
    )


def fields(response: Any) -> set[str]:
    assert response.status_code == 422, response.get_json()
    return {d["field"] for d in response.get_json()["error"]["details"]}


def post(client: FlaskClient, content: str) -> Any:
    return client.post("/api/catalog", data=content, content_type="application/yaml")


def test_register_is_versioned_and_identical_content_returns_the_existing_version(client: FlaskClient) -> None:
    first = post(client, playbook("domain/handle"))
    assert first.status_code == 201 and first.get_json()["version"] == 1 and first.get_json()["created"]
    again = post(client, playbook("domain/handle"))
    assert again.status_code == 200 and not again.get_json()["created"]
    assert again.get_json()["catalog_id"] == first.get_json()["catalog_id"]
    changed = post(client, playbook("domain/handle") + "# a comment makes new content\n")
    assert changed.status_code == 201 and changed.get_json()["version"] == 2
    assert client.get("/api/catalog/domain/handle").get_json()["version"] == 2
    v1 = client.get("/api/catalog/domain/handle?version=1").get_json()
    assert v1["version"] == 1 and v1["content"] == playbook("domain/handle")
    assert v1["document"]["workflow"][0]["step"] == "start"


def test_json_body_form_and_listing_by_kind(client: FlaskClient) -> None:
    response = client.post("/api/catalog", json={"content": playbook("domain/handle")})
    assert response.status_code == 201
    register(client, push())
    kinds = {i["path"]: i["kind"] for i in client.get("/api/catalog").get_json()["items"]}
    assert kinds == {"domain/handle": "Playbook", "subscriptions/hooks": "Subscription"}
    only = client.get("/api/catalog?kind=Subscription").get_json()["items"]
    assert [i["path"] for i in only] == ["subscriptions/hooks"]
    assert client.get("/api/catalog?kind=Nope").status_code == 400


def test_every_registration_is_an_event_at_the_catalog_version(client: FlaskClient, plane: ControlPlane) -> None:
    post(client, playbook("domain/handle"))
    post(client, playbook("domain/handle") + "#v2\n")
    events = plane.store.read_stream("catalog/domain/handle")
    assert [(e.event_type, e.stream_version, e.payload["version"]) for e in events] == [
        ("catalog.registered", 1, 1),
        ("catalog.registered", 2, 2),
    ]


def test_unknown_path_and_version_are_404(client: FlaskClient) -> None:
    assert client.get("/api/catalog/none/such").get_json()["error"]["code"] == "catalog_not_found"
    post(client, playbook("domain/handle"))
    assert client.get("/api/catalog/domain/handle?version=9").status_code == 404
    assert client.get("/api/catalog/domain/handle?version=x").status_code == 400


def test_a_path_cannot_change_kind(client: FlaskClient) -> None:
    post(client, playbook("domain/handle"))
    clash = push(name="x").replace("subscriptions/x", "domain/handle")
    response = post(client, clash)
    assert response.status_code == 409 and response.get_json()["error"]["code"] == "catalog_kind_mismatch"


def test_invalid_yaml_and_root_vars_are_422(client: FlaskClient) -> None:
    assert post(client, "kind: [unclosed").status_code == 422
    assert "vars" in fields(post(client, playbook("domain/x") + "vars: {a: 1}\n"))


@pytest.mark.parametrize(
    "content,field",
    [
        (push(verify="null"), "spec.ingress.verify"),
        (push(verify="{type: none}"), "spec.ingress.verify.type"),
        (
            push(directives="[{header: x-noetl-route, controls: dispatch.playbook}]"),
            "spec.headers.directives.0.allowed",
        ),
        (
            push(directives="[{header: x-noetl-pool, controls: dispatch.execution_pool, allowed: []}]"),
            "spec.headers.directives.0.allowed",
        ),
        (push(directives="[{header: x-priority, controls: priority}]"), "spec.headers.directives.0.map"),
        (
            push(
                spool="{mode: buffer_and_ack, backend: gcs, bucket: b, ordering: global,"
                " drain: {on_recovery: interleave}}"
            ),
            "spec.spool.drain.on_recovery",
        ),
        (push(target="domain/unregistered"), "spec.dispatch.playbook"),
        (
            push(
                directives="[{header: x-noetl-route, controls: dispatch.playbook,"
                " allowed: [domain/handle, domain/ghost]}]"
            ),
            "spec.headers.directives.0.allowed",
        ),
        (push(pool="gpu"), "spec.dispatch.execution_pool"),
        (
            push(directives="[{header: x-noetl-pool, controls: dispatch.execution_pool, allowed: [iot, gpu]}]"),
            "spec.headers.directives.0.allowed",
        ),
        (
            push(directives="[{header: x-priority, controls: priority, map: {high: gpu}}]"),
            "spec.headers.directives.0.map",
        ),
    ],
    ids=[
        "push-without-verify",
        "verify-none",
        "route-directive-without-allowed",
        "pool-directive-empty-allowed",
        "priority-without-map",
        "interleave-with-global-ordering",
        "dispatch-playbook-unregistered",
        "route-target-unregistered",
        "unknown-dispatch-pool",
        "unknown-allowed-pool",
        "unknown-priority-pool",
    ],
)
def test_rejected_subscription_specs_are_422_naming_the_field(client: FlaskClient, content: str, field: str) -> None:
    post(client, playbook("domain/handle"))
    assert field in fields(post(client, content))
    assert client.get("/api/catalog?kind=Subscription").get_json()["items"] == []


def test_two_subscriptions_cannot_claim_one_gateway_path(client: FlaskClient) -> None:
    post(client, playbook("domain/handle"))
    register(client, push(name="first", listener="shared-hook"))
    assert "spec.ingress.gateway_path" in fields(post(client, push(name="second", listener="shared-hook")))
    # The owner itself may register a new version on the same path.
    assert post(client, push(name="first", listener="shared-hook") + "# v2\n").status_code == 201


def test_a_valid_subscription_with_allowlisted_routes_registers(client: FlaskClient) -> None:
    post(client, playbook("domain/handle"))
    post(client, playbook("domain/fraud"))
    content = push(
        pool="iot",
        directives="[{header: X-Noetl-Route, controls: dispatch.playbook, allowed: [domain/handle, domain/fraud]},"
        " {header: x-noetl-pool, controls: dispatch.execution_pool, allowed: [shared, iot]},"
        " {header: x-priority, controls: priority, map: {high: iot, normal: shared}}]",
    )
    body = register(client, content)
    assert body["kind"] == "Subscription" and body["version"] == 1
    document = client.get("/api/catalog/subscriptions/hooks").get_json()["document"]
    assert document["spec"]["headers"]["directives"][0]["header"] == "x-noetl-route"


def test_a_refused_playbook_answers_every_problem_with_its_fix_in_the_error_details(client: FlaskClient) -> None:
    from tests.unit.test_cli_validation import EXPECTED, LEGACY

    response = post(client, LEGACY)
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert (error["code"], error["message"]) == ("validation_failed", "Playbook document failed validation")
    problems = {d["field"]: d["problem"] for d in error["details"]}
    assert set(problems) == set(EXPECTED)
    for field, fix in EXPECTED.items():
        assert fix in problems[field], (field, problems[field])
    assert client.get("/api/catalog/legacy").status_code == 404
