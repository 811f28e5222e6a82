"""Authorization by caller role (issue #21 item 7): the one policy table, deny by default, the role
mappings of the settings, and the local stack's tokens per purpose."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from flask import Flask

from noetl_cloud.auth import roles
from noetl_cloud.auth.google_oidc import JwksCache
from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.control.ingress_scope import TTL_S, IngressScope, scoped
from noetl_cloud.control.models import ExecuteRequest
from noetl_cloud.errors import ConfigError, Conflict, NoetlError, NotFound
from noetl_cloud.local import tokens
from noetl_cloud.openapi.roles import ROLES, role_app
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app
from tests.unit.test_google_oidc import AUDIENCE, NOW, FakeGoogle

#: The prefixes an app authenticates (noetl_cloud.auth.internal.install): every route under one needs a policy.
AUTHENTICATED = ("/api", "/console", "/drain")
#: The methods Flask adds by itself (HEAD is authorized as GET; OPTIONS is refused to all).
IMPLICIT = {"HEAD", "OPTIONS"}
OPENAPI = ("GET", "/api/openapi.json")

WORKER, INGRESS, OPERATOR, SCHEDULER = "worker-token", "ingress-token", "operator-token", "scheduler-token"


def digests(**by_role: str) -> dict[str, set[str]]:
    return {hashlib.sha256(token.encode()).hexdigest(): {role} for role, token in by_role.items()}


def declared_routes(app: Flask) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule == "/api" or rule.rule.startswith(AUTHENTICATED):
            routes |= {(method, rule.rule) for method in (rule.methods or set()) - IMPLICIT}
    return routes


@pytest.mark.parametrize("service", ROLES)
def test_every_authenticated_route_of_every_app_has_a_declared_policy_and_no_entry_is_stale(service: str) -> None:
    routes = declared_routes(role_app(service))
    policy = set(roles.policy_for(service))
    assert routes - policy == set(), f"routes of {service} with no policy in noetl_cloud.auth.roles.POLICY"
    assert policy - routes == set(), f"policy entries of {service} that match no route"
    assert all(allowed for allowed in roles.POLICY[service].values())


def test_terraform_grants_each_service_to_exactly_the_roles_its_routes_admit() -> None:
    from tests.unit.terraform_support import parse

    iam = parse(Path(__file__).resolve().parents[2] / "infra" / "modules" / "iam" / "main.tf")
    granted = next(b["service_callers"] for b in iam["locals"] if "service_callers" in b)
    for service, caller_roles in granted.items():
        admitted = set().union(*(allowed for route, allowed in roles.POLICY[service].items() if route != OPENAPI))
        pushed = {roles.PUSH} if service in ("worker", "projector") else set()  # POST /, its own credentials
        assert set(caller_roles) == admitted | pushed, service


def test_only_the_ingress_reads_listener_configuration_and_only_the_worker_reports() -> None:
    execute = roles.POLICY["execute"]
    assert execute[("GET", "/api/internal/ingress/<listener:listener>")] == {roles.INGRESS}
    assert execute[("POST", "/api/events")] == {roles.WORKER}
    assert roles.INGRESS not in execute[("POST", "/api/catalog")] | execute[("POST", "/api/events")]
    assert roles.WORKER not in execute[("POST", "/api/catalog")] | execute[("POST", "/api/subscriptions/register")]


class Reached(Conflict):
    code = "reached_the_service"


class Catalog:
    """Listener ``orders`` dispatches to ``orders/handle``, or by directive to ``orders/vip``."""

    def __init__(self) -> None:
        self.reads = 0

    def subscription_for_listener(self, gateway_path: str) -> Any:
        self.reads += 1
        if gateway_path != "/ingress/orders":
            raise NotFound("no such listener", code="unknown_listener")
        directive = {"header": "x-route", "controls": "dispatch.playbook", "allowed": ["orders/vip"]}
        spec = {"dispatch": {"playbook": "orders/handle"}, "headers": {"directives": [directive]}}
        return SimpleNamespace(document={"spec": spec})


class Plane:
    """A control plane whose every service answers 409 ``reached_the_service``: the request got past
    authorization (and, for the ingress, its listener scope)."""

    settings = Settings()
    ingress_scope = IngressScope(Catalog())

    def __getattr__(self, name: str) -> Any:
        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            raise Reached(name)

        return SimpleNamespace(
            register=refuse, list=refuse, get=refuse, report=refuse, transition=refuse, config=refuse, start_one=refuse
        )


def execute_app(auth: InternalAuth) -> Flask:
    from noetl_cloud.control.app import build_app

    return build_app(Plane(), auth)  # type: ignore[arg-type]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_each_token_calls_its_own_routes_and_is_refused_403_forbidden_role_elsewhere() -> None:
    auth = InternalAuth(token_digests=digests(worker=WORKER, ingress=INGRESS, operator=OPERATOR))
    client = execute_app(auth).test_client()
    not_json = {"data": "[]", "content_type": "application/json"}  # refused by validation, after authorization

    refused = client.post("/api/catalog", headers=bearer(WORKER), **not_json)
    assert refused.status_code == 403
    error = refused.get_json()["error"]
    assert error["code"] == "forbidden_role"
    assert error["details"] == {
        "route": "POST /api/catalog",
        "caller_roles": ["worker"],
        "allowed_roles": ["operator"],
    }
    assert client.get("/api/internal/ingress/orders", headers=bearer(WORKER)).status_code == 403
    assert client.get("/api/internal/ingress/orders", headers=bearer(OPERATOR)).status_code == 403
    assert client.post("/api/events", headers=bearer(INGRESS), **not_json).status_code == 403
    assert client.post("/api/subscriptions/1/pause", headers=bearer(INGRESS)).status_code == 403
    assert client.post("/api/subscriptions/register", headers=bearer(WORKER), json={}).status_code == 403

    assert client.post("/api/subscriptions/register", headers=bearer(OPERATOR), json={}).status_code == 422
    assert client.post("/api/events", headers=bearer(WORKER), **not_json).status_code == 400
    reached = [
        client.post("/api/catalog", headers=bearer(OPERATOR), data="kind: Playbook", content_type="text/yaml"),
        client.get("/api/internal/ingress/orders", headers=bearer(INGRESS)),
        client.post("/api/subscriptions/1/pause", headers=bearer(OPERATOR)),
        client.post(
            "/api/execute", headers=bearer(INGRESS), json={"path": "orders/vip", "meta": {"listener": "orders"}}
        ),
        client.post("/api/execute", headers=bearer(OPERATOR), json={"path": "admin/anything"}),
    ]
    assert [r.get_json()["error"]["code"] for r in reached] == ["reached_the_service"] * 5
    # the ingress starts its listeners' playbooks only
    for body in (
        {"path": "admin/anything", "meta": {"listener": "orders"}},
        {"path": "orders/handle"},
        {"path": "orders/handle", "meta": {"listener": "someone-else"}},
        {"catalog_id": "1", "meta": {"listener": "orders"}},
    ):
        refused = client.post("/api/execute", headers=bearer(INGRESS), json=body)
        assert refused.status_code == 403 and refused.get_json()["error"]["code"] == "forbidden_target", body
    # an unknown path is still 404 (after authentication), HEAD is GET, OPTIONS is declared nowhere
    assert client.get("/api/nothing-here", headers=bearer(WORKER)).status_code == 404
    assert client.head("/api/catalog", headers=bearer(WORKER)).status_code == 403
    assert client.options("/api/catalog", headers=bearer(OPERATOR)).status_code == 403


def test_an_undeclared_route_is_refused_to_every_role() -> None:
    app = create_app("execute", Settings())
    install(app, InternalAuth(token=OPERATOR))  # one shared token: every caller role

    @app.get("/api/new-and-undeclared")
    def undeclared() -> dict[str, str]:
        return {"reached": "yes"}

    response = app.test_client().get("/api/new-and-undeclared", headers=bearer(OPERATOR))
    assert response.status_code == 403 and response.get_json()["error"]["code"] == "forbidden_role"


def test_google_id_tokens_are_mapped_to_roles_by_email() -> None:
    google = FakeGoogle()
    settings = Settings.from_env(
        {
            "NOETL_INTERNAL_API_CALLERS": "ingress=noetl-ingress@p.iam.gserviceaccount.com,"
            "operator=ops@p.iam.gserviceaccount.com, scheduler=ops@p.iam.gserviceaccount.com"
        }
    )
    keys = JwksCache(fetch=google.fetch, clock=lambda: 0.0)
    auth = InternalAuth.from_settings(settings, audience=AUDIENCE, keys=keys)
    auth._now = lambda: NOW  # the minted tokens' clock
    ingress = auth.authenticate(f"Bearer {google.mint(email='noetl-ingress@p.iam.gserviceaccount.com')}")
    assert ingress.roles == {roles.INGRESS}
    ops = auth.authenticate(f"Bearer {google.mint(email='ops@p.iam.gserviceaccount.com')}")
    assert ops.roles == {roles.OPERATOR, roles.SCHEDULER}


def test_caller_settings_are_role_entries_and_refused_otherwise() -> None:
    for bad in ("noetl-ingress@p.iam.gserviceaccount.com", "admin=x@p", "ingress=", "ingress=not-an-email"):
        with pytest.raises(ConfigError) as info:
            Settings.from_env({"NOETL_INTERNAL_API_CALLERS": bad})
        assert info.value.code == "config_invalid" and "NOETL_INTERNAL_API_CALLERS" in info.value.message
    with pytest.raises(ConfigError):
        Settings.from_env({"NOETL_INTERNAL_API_TOKEN_DIGESTS": "worker=abc"})
    with pytest.raises(ConfigError, match="service account emails"):
        InternalAuth.from_settings(Settings(), audience=AUDIENCE)  # ID tokens need the role entries


def test_with_digests_the_process_own_token_is_only_its_credential_as_a_caller() -> None:
    worker_digest = hashlib.sha256(WORKER.encode()).hexdigest()
    settings = Settings.from_env(
        {"NOETL_INTERNAL_API_TOKEN": "my-own-token", "NOETL_INTERNAL_API_TOKEN_DIGESTS": f"worker={worker_digest}"}
    )
    auth = InternalAuth.from_settings(settings)
    assert auth.authenticate(f"Bearer {WORKER}").roles == {roles.WORKER}
    with pytest.raises(NoetlError) as info:
        auth.authenticate("Bearer my-own-token")
    assert info.value.code == "bad_credentials"
    # without digests, the one shared token of a test harness holds every caller role
    shared = InternalAuth.from_settings(Settings.from_env({"NOETL_INTERNAL_API_TOKEN": "shared"}))
    assert shared.authenticate("Bearer shared").roles == roles.EVERY_ROLE


# -- the local stack's tokens ------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_local_tokens_differ_per_purpose_are_kept_and_owner_only(tmp_path: Path) -> None:
    (tmp_path / "api_token").write_text("the old shared token")
    made = tokens.ensure_tokens(tmp_path)
    assert set(made) == set(tokens.PURPOSES) and len(set(made.values())) == len(made)
    assert mode(tmp_path / "tokens.json") == 0o600
    assert not (tmp_path / "api_token").exists()
    (tmp_path / "tokens.json").chmod(0o644)
    assert tokens.ensure_tokens(tmp_path) == made  # kept, and made owner-only again
    assert mode(tmp_path / "tokens.json") == 0o600


def test_private_files_are_0600_also_when_they_existed_wider(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text("old")
    path.chmod(0o644)
    old_umask = os.umask(0)
    try:
        tokens.write_private(path, "NOETL_INTERNAL_API_TOKEN=x\n")
    finally:
        os.umask(old_umask)
    assert mode(path) == 0o600 and path.read_text() == "NOETL_INTERNAL_API_TOKEN=x\n"


def test_each_local_role_gets_only_its_own_credentials(tmp_path: Path) -> None:
    keys = tokens.ensure_tokens(tmp_path)
    inherited = {"NOETL_INTERNAL_API_TOKEN": keys["operator"], "NOETL_API_URL": "http://127.0.0.1:1"}
    worker = tokens.role_env("worker", inherited, keys)
    assert worker["NOETL_INTERNAL_API_TOKEN"] == keys["worker"]
    assert worker["NOETL_WORKER_PUSH_TOKEN"] == keys["worker_push"]
    assert worker["NOETL_PROJECTOR_PUSH_TOKEN"] == worker["NOETL_INTERNAL_API_TOKEN_DIGESTS"] == ""
    assert keys["operator"] not in worker.values() and worker["NOETL_API_URL"] == "http://127.0.0.1:1"
    execute = tokens.role_env("execute", inherited, keys)
    assert execute["NOETL_INTERNAL_API_TOKEN"] == ""
    served = Settings.from_env({k: v for k, v in execute.items() if k.startswith("NOETL_")})
    auth = InternalAuth.from_settings(served)
    for purpose in tokens.CALLER_PURPOSES:
        assert auth.authenticate(f"Bearer {keys[purpose]}").roles == {purpose}
        assert keys[purpose] not in execute.values()
    drainer = tokens.role_env("spool_drainer", inherited, keys)
    assert drainer["NOETL_INTERNAL_API_TOKEN"] == keys["spool_drainer"] and drainer["NOETL_INTERNAL_API_TOKEN_DIGESTS"]
    assert tokens.role_env("scheduler", inherited, keys)["NOETL_INTERNAL_API_TOKEN"] == keys["scheduler"]
    assert tokens.operator_env(keys)["NOETL_INTERNAL_API_TOKEN"] == keys["operator"]


def test_the_security_doc_lists_every_route_with_the_roles_the_policy_admits() -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    section = text.split("## What each role may call", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, dict[tuple[str, str], set[str]]] = {}
    service = ""
    for line in section.splitlines():
        heading = re.fullmatch(r"\*\*(\w+)\*\*", line.strip())
        if heading:
            service = heading.group(1)
        row = re.fullmatch(r"\| `(GET|POST) (\S+)` \| (.+) \|", line.strip())
        if row and service:
            who = roles.CALLER_ROLES | {roles.PUSH} if row.group(3) == "every caller role" else row.group(3).split(", ")
            documented.setdefault(service, {})[(row.group(1), row.group(2))] = set(who)
    for service, table in documented.items():
        assert table == {route: set(allowed) for route, allowed in roles.POLICY[service].items()}, service
    assert set(documented) == {"execute", "frames", "projector", "spool_drainer"}


def test_the_ingress_scope_reads_the_catalog_once_per_listener_and_ttl_and_again_before_a_refusal() -> None:
    catalog, now = Catalog(), [0.0]
    scope = IngressScope(catalog, clock=lambda: now[0])
    delivery = ExecuteRequest(path="orders/handle", meta={"listener": "orders"})
    for _ in range(100):
        scope.check(delivery)
    assert catalog.reads == 1  # the hot path is a dict lookup
    now[0] += TTL_S + 1
    scope.check(delivery)
    assert catalog.reads == 2
    with pytest.raises(NoetlError) as info:
        scope.check(ExecuteRequest(path="admin/anything", meta={"listener": "orders"}))
    assert info.value.code == "forbidden_target" and catalog.reads == 3
    assert scoped(frozenset({roles.INGRESS})) and not scoped(roles.EVERY_ROLE)
