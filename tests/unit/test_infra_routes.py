"""What Terraform points at exists, answers the caller Terraform configures, and starts with what
Terraform gives it.

The stack (``infra/modules/stack/main.tf``) names every path it sends a caller to in ``local.routes``
(push endpoints of worker and projector, scheduler jobs, the health probe). These tests

* build each role's Flask app from its entry point (``functions/<role>/main.py``) with exactly the
  environment the stack sets on its service, read from the Terraform source, with placeholder values
  (no live service is needed: nothing connects while an app is built);
* prove every route Terraform targets is a route (path and method) of the role it targets;
* mint Google ID tokens the way Cloud Scheduler and Pub/Sub push do (audience and identity from the
  Terraform source) and prove the target app accepts them, and refuses a token for another audience;
* prove that every ``NOETL_*`` variable Terraform sets is a setting and that each role starts with them.

A renamed route, a moved audience or a missing setting breaks a test here.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from flask import Flask

from noetl_cloud.auth import google_oidc, internal
from noetl_cloud.settings import Settings
from noetl_cloud.telemetry import setup as telemetry_setup
from tests.unit.test_google_oidc import FakeGoogle, rsa_key
from tests.unit.test_infra import MODULES, STACK, _parse, _roles

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "noetl"
PROJECT = "proj-1"
POOLS = ("shared", "etl")
RUNTIME_SUBSCRIPTIONS = {"sensors": "subscriptions/sensors"}


# -- the Terraform source ---------------------------------------------------------------------------


def _locals(path: Path) -> dict[str, Any]:
    return {k: v for block in _parse(path).get("locals", []) for k, v in block.items()}


def _block(text: str, start: str) -> str:
    """The text of the ``{ ... }`` that follows ``start`` in ``text`` (braces balanced)."""
    i = text.index(start)
    i = text.index("{", i)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    raise AssertionError(f"unbalanced block after {start!r}")


def _between(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i : text.index(end, i)]


def _entries(block: str) -> dict[str, str]:
    """Top-level ``name = <value>`` entries of an object body (values as text)."""
    entries: dict[str, str] = {}
    depth = 0
    current: str | None = None
    for line in block.splitlines():
        match = re.match(r"^\s*([A-Za-z_][\w-]*)\s*=\s*(.*)$", line)
        if depth == 0 and match:
            current = match.group(1)
            entries[current] = match.group(2)
        elif current is not None:
            entries[current] += "\n" + line
        depth += (
            line.count("{") + line.count("(") + line.count("[") - line.count("}") - line.count(")") - line.count("]")
        )
    return entries


STACK_TEXT = (STACK / "main.tf").read_text()
IAM_TEXT = (MODULES / "iam" / "main.tf").read_text()
ROUTES: dict[str, dict[str, str]] = _locals(STACK / "main.tf")["routes"]


def _services() -> dict[str, dict[str, str | None]]:
    """The services the stack deploys for every role, these pools and runtime subscriptions (mirrors local.services)."""
    text = _between(STACK_TEXT, "services = merge(", "service_url =")
    assert 'if !contains(["worker", "subscription_runtime"], r)' in text
    assert '"worker-${p}"' in text and '"${var.name_prefix}-worker-${p}"' in text
    assert '"subscription_runtime-${n}"' in text and '"${var.name_prefix}-runtime-${n}"' in text
    services: dict[str, dict[str, str | None]] = {
        r: {"role": r, "name": f"{PREFIX}-{r.replace('_', '-')}", "pool": None, "subscription": None}
        for r in _roles()
        if r not in ("worker", "subscription_runtime")
    }
    for pool in POOLS:
        services[f"worker-{pool}"] = {
            "role": "worker",
            "name": f"{PREFIX}-worker-{pool}",
            "pool": pool,
            "subscription": None,
        }
    for name, path in RUNTIME_SUBSCRIPTIONS.items():
        services[f"subscription_runtime-{name}"] = {
            "role": "subscription_runtime",
            "name": f"{PREFIX}-runtime-{name}",
            "pool": None,
            "subscription": path,
        }
    return services


SERVICES = _services()


def url_of(key: str) -> str:
    """A distinct URL per service, so a token minted for one service is refused by another."""
    return f"https://{SERVICES[key]['name']}-123456789.test-region.run.app"


def email(account: str) -> str:
    return f"{PREFIX}-{account.replace('_', '-')}@{PROJECT}.iam.gserviceaccount.com"


PUSH_EMAIL = email("pubsub-push")
SCHEDULER_EMAIL = email("scheduler")
DEPLOYER_EMAIL = email("deployer")
OPERATOR = "oncall@example.com"


def _members(caller_role: str) -> list[str]:
    """The emails holding a caller role (mirrors local.caller_members in modules/iam)."""
    fixed = {
        "scheduler": [SCHEDULER_EMAIL],
        "operator": [OPERATOR],
        "deployer": [DEPLOYER_EMAIL],
        "pubsub_push": [PUSH_EMAIL],
    }
    return fixed.get(caller_role, [email(caller_role)])


def _service_callers(role: str) -> list[str]:
    """local.service_callers[role] of modules/iam: the caller roles of the service."""
    return list(_locals(MODULES / "iam" / "main.tf")["service_callers"][role])


def _api_callers(role: str) -> list[str]:
    """local.api_callers[role]: ``<role>=<email>`` of each caller but the push identity."""
    assert 'if r != "pubsub_push"' in _block(IAM_TEXT, "api_callers = {")  # no push identity in an API allowlist
    return [f"{r}={m}" for r in _service_callers(role) if r != "pubsub_push" for m in _members(r)]


def _value(expr: str, key: str) -> str:
    """A placeholder for the Terraform expression ``expr`` of a service's variable (unknown shapes fail)."""
    expr = expr.strip()
    literal = re.fullmatch(r'"([^"$]*)"', expr)
    if literal:
        return literal.group(1)
    url = re.fullmatch(r'(?:try\()?local\.url\["(\w+)"\](?:, ""\))?', expr)
    if url:
        return url_of(url.group(1))
    if expr == "local.service_url[k]":
        return url_of(key)
    callers = re.fullmatch(r'join\(",", module\.iam\.api_callers\["(\w+)"\]\)', expr)
    if callers:
        return ",".join(_api_callers(callers.group(1)))
    fixed = {
        "var.project_id": PROJECT,
        "var.region": "test-region",
        "var.tenant.log_level": "INFO",
        "var.tenant.tenant_id": "default",
        "var.tenant.organization_id": "default",
        "var.telemetry.tracing": "cloud",
        "tostring(var.telemetry.sample_ratio)": "0.1",
        "var.telemetry.metrics": "cloud",
        'join(",", sort(tolist(var.pools)))': ",".join(sorted(POOLS)),
        "local.events_topic": f"{PREFIX}-events",
        "local.command_topic_prefix": f"{PREFIX}-commands-",
        "local.kv_collection": f"{PREFIX}-kv",
        "module.cloudsql.connection_name": f"{PROJECT}:test-region:{PREFIX}",
        "module.cloudsql.database": "noetl",
        "module.cloudsql.ip_type": "private",
        "module.spool_bucket.name": f"{PREFIX}-spool-{PROJECT}",
        "module.payload_bucket.name": f"{PREFIX}-payloads-{PROJECT}",
        "module.archive_bucket.name": f"{PREFIX}-archive-{PROJECT}",
        "module.iam.push_email": PUSH_EMAIL,
        'trimsuffix(module.iam.role_emails[s.role], ".gserviceaccount.com")': email(str(SERVICES[key]["role"]))[
            : -len(".gserviceaccount.com")
        ],
        # The stack's default pool of every control-plane role (modules/sizing counts it).
        "tostring(var.roles[s.role].db_pool_size)": "5",
        "tostring(var.roles[s.role].db_max_overflow)": "2",
        "s.pool": str(SERVICES[key]["pool"]),
        "s.subscription": str(SERVICES[key]["subscription"]),
    }
    assert expr in fixed, f"{key}: no placeholder for the Terraform expression {expr!r}; teach _value"
    return fixed[expr]


def _assignments(block: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(NOETL_[A-Z_]+)\s*=\s*(.+?)\s*$", block, re.M))


def terraform_env(key: str) -> dict[str, str]:
    """The environment the stack sets on service ``key`` (mirrors local.service_env), with placeholders."""
    role = str(SERVICES[key]["role"])
    stack_locals = _block(STACK_TEXT, "locals {")
    role_env = _entries(_block(stack_locals, "role_env = {"))
    assert set(role_env) == set(_roles()), "role_env has an entry per role"
    exprs: dict[str, str] = {}
    exprs.update(_assignments(_block(stack_locals, "common_env = {")))
    if "local.database_env" in role_env[role]:
        exprs.update(_assignments(_block(stack_locals, "database_env = {")))
    if "local.spool_env" in role_env[role]:
        exprs.update(_assignments(_block(stack_locals, "spool_env = {")))
    exprs.update(_assignments(role_env[role]))
    service_env = _block(stack_locals, "service_env = {")
    control_plane = re.search(r"control_plane = setintersection\(local\.roles, \[([^]]*)\]\)", stack_locals)
    assert control_plane
    if role in re.findall(r'"(\w+)"', control_plane.group(1)):
        exprs.update(_assignments(_block(service_env, "contains(local.control_plane, s.role) ?")))
    for condition in re.findall(r's\.role == "(\w+)" \?', service_env):
        if condition == role:
            exprs.update(_assignments(_block(service_env, f's.role == "{condition}" ?')))
    env = {name: _value(expr, key) for name, expr in exprs.items()}
    # The module sets the role itself (modules/cloud_run_service).
    assert 'name  = "NOETL_ROLE"' in (MODULES / "cloud_run_service" / "main.tf").read_text()
    env["NOETL_ROLE"] = role
    return {k: v for k, v in env.items() if v != ""}


# -- building the roles' apps ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def google() -> FakeGoogle:
    return FakeGoogle()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, google: FakeGoogle) -> Iterator[None]:
    """No network: Google's keys come from ``google``; client libraries find a local key file."""
    for name in list(__import__("os").environ):
        if name.startswith(("NOETL_", "GOOGLE_", "PUBSUB_", "FIRESTORE_", "STORAGE_")):
            monkeypatch.delenv(name)
    key = rsa_key("adc")
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    adc = tmp_path / "adc.json"
    adc.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "adc",
                "private_key": pem,
                "client_email": email("test"),
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))

    def keys(*_args: Any, **_kwargs: Any) -> google_oidc.JwksCache:
        return google_oidc.JwksCache(fetch=google.fetch)

    monkeypatch.setattr(internal, "JwksCache", keys)
    # The roles trace and measure to Google (the Terraform environment says "cloud"): their exporters are
    # built as deployed, but sending is refused at once, as by an unreachable Google, instead of each
    # flush (a role's app built again, the end of the test) waiting out the client's 30 s timeout.
    from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter
    from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExportResult

    monkeypatch.setattr(CloudTraceSpanExporter, "export", lambda *_a, **_k: SpanExportResult.FAILURE)
    monkeypatch.setattr(CloudMonitoringMetricsExporter, "export", lambda *_a, **_k: MetricExportResult.FAILURE)
    yield
    telemetry_setup.shutdown()  # flushed here, while sending is still refused


def build(key: str, monkeypatch: pytest.MonkeyPatch) -> Flask:
    """The app of service ``key`` as its entry point builds it, under the Terraform environment."""
    role = str(SERVICES[key]["role"])
    for name, value in terraform_env(key).items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"entry_{key}", ROOT / "functions" / role / "main.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = module.app.app
    assert isinstance(app, Flask)
    return app


def mint(google: FakeGoogle, audience: str, who: str) -> str:
    now = int(time.time())
    return google.mint(aud=audience, email=who, iat=now - 10, exp=now + 3000)


# -- the routes ----------------------------------------------------------------------------------------


def test_routes_name_real_roles_and_methods() -> None:
    assert {"worker_push", "projector_push", "frame_reaper", "outbox_sweep", "spool_drain", "command_reaper"} <= set(
        ROUTES
    )
    for name, route in ROUTES.items():
        assert route["role"] in {*_roles(), "*"}, name
        assert route["method"] in ("GET", "POST"), name
        assert route["path"].startswith("/"), name
    assert ROUTES["frame_reaper"] == {"role": "frames", "method": "POST", "path": "/api/internal/frames/reap"}


@pytest.mark.parametrize("key", sorted(SERVICES))
def test_every_targeted_route_is_a_route_of_its_role(key: str, offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    app = build(key, monkeypatch)
    role = SERVICES[key]["role"]
    targeted = [(n, r) for n, r in ROUTES.items() if r["role"] in (role, "*")]
    assert targeted
    adapter = app.url_map.bind("localhost")
    for name, route in targeted:
        endpoint, _args = adapter.match(route["path"], method=route["method"])  # NotFound / MethodNotAllowed fail
        assert endpoint in app.view_functions, name


def test_every_scheduler_job_and_push_subscription_calls_a_route_with_its_service_url_as_audience() -> None:
    jobs = _locals(STACK / "maintenance_schedule.tf")["maintenance_schedule"]
    assert {j["route"] for j in jobs.values()} == {
        "outbox_sweep",
        "command_reaper",
        "retention",
        "subscription_tick",
        "frame_reaper",
        "projector_catch_up",
        "spool_drain",
    }
    scheduler = _between(STACK_TEXT, "scheduler_jobs = merge(", 'resource "google_project_service"')
    uris = re.findall(r"uri\s*=\s*(.+)", scheduler)
    audiences = re.findall(r"audience\s*=\s*(.+)", scheduler)
    methods = re.findall(r"http_method\s*=\s*(.+)", scheduler)
    assert uris == [
        '"${local.url[local.routes[j.route].role]}${local.routes[j.route].path}"',
        '"${local.url[local.routes.scheduled_execution.role]}${local.routes.scheduled_execution.path}"',
    ]
    assert audiences == ["local.url[local.routes[j.route].role]", "local.url[local.routes.scheduled_execution.role]"]
    assert methods == ["local.routes[j.route].method", "local.routes.scheduled_execution.method"]
    pubsub = _block(STACK_TEXT, 'module "pubsub" {')
    assert 'push_endpoint = try("${local.service_url["worker-${p}"]}${local.routes.worker_push.path}", null)' in pubsub
    assert 'audience      = try(local.service_url["worker-${p}"], null)' in pubsub
    assert "${local.routes.projector_push.path}" in pubsub
    assert re.search(r"audience\s+= try\(local\.url\[local\.routes\.projector_push\.role\]", pubsub)
    # The scheduler module sends the method it is given and an OIDC token for the audience.
    scheduler_module = (MODULES / "scheduler" / "main.tf").read_text()
    assert "http_method = each.value.http_method" in scheduler_module
    assert "audience              = each.value.audience" in scheduler_module


def _scheduled_calls() -> list[tuple[str, str]]:
    jobs = _locals(STACK / "maintenance_schedule.tf")["maintenance_schedule"]
    return sorted(
        {(ROUTES[j["route"]]["role"], j["route"]) for j in jobs.values()} | {("execute", "scheduled_execution")}
    )


@pytest.mark.parametrize(("key", "route"), _scheduled_calls())
def test_the_target_of_each_scheduler_job_accepts_the_scheduler_token_for_its_url(
    key: str, route: str, offline: None, monkeypatch: pytest.MonkeyPatch, google: FakeGoogle
) -> None:
    app = build(key, monkeypatch)
    target = ROUTES[route]
    endpoint, _ = app.url_map.bind("localhost").match(target["path"], method=target["method"])
    app.view_functions[endpoint] = lambda **_kw: {"reached": True}  # auth runs before; no database here
    client = app.test_client()

    def call(token: str) -> Any:
        return client.open(
            target["path"], method=target["method"], json={}, headers={"Authorization": f"Bearer {token}"}
        )

    accepted = call(mint(google, url_of(key), SCHEDULER_EMAIL))
    assert accepted.status_code == 200 and accepted.json == {"reached": True}, accepted.json
    other_service = next(k for k in SERVICES if k != key)
    refused = call(mint(google, url_of(other_service), SCHEDULER_EMAIL))
    assert refused.status_code == 401, refused.json
    stranger = call(mint(google, url_of(key), email("stranger")))
    assert stranger.status_code == 403, stranger.json


@pytest.mark.parametrize("key", [*(f"worker-{p}" for p in POOLS), "projector"])
def test_each_push_endpoint_accepts_the_push_identity_token_for_its_own_url(
    key: str, offline: None, monkeypatch: pytest.MonkeyPatch, google: FakeGoogle
) -> None:
    app = build(key, monkeypatch)
    route = ROUTES["worker_push" if key.startswith("worker") else "projector_push"]
    client = app.test_client()

    def push(token: str) -> Any:
        # Not a Pub/Sub envelope: once authenticated, the endpoint refuses it as a bad payload (400).
        return client.post(route["path"], data=b"not an envelope", headers={"Authorization": f"Bearer {token}"})

    accepted = push(mint(google, url_of(key), PUSH_EMAIL))
    assert accepted.status_code == 400, accepted.json
    # Another pool's worker, or another service: its URL is not this endpoint's audience.
    other = next(k for k in SERVICES if k != key and SERVICES[k]["role"] in ("worker", "projector"))
    assert push(mint(google, url_of(other), PUSH_EMAIL)).status_code == 401
    assert push(mint(google, url_of(key), SCHEDULER_EMAIL)).status_code == 403


def test_the_execute_api_accepts_the_deployer_smoke_test_and_the_projector_api_does_not(
    offline: None, monkeypatch: pytest.MonkeyPatch, google: FakeGoogle
) -> None:
    """Cloud Build smoke-tests GET /api/catalog on execute as the deployer (cloudbuild.yaml); the
    projector, internal-only, no longer admits the deployer, and still admits the operators."""
    execute = build("execute", monkeypatch)
    endpoint, _ = execute.url_map.bind("localhost").match("/api/catalog", method="GET")
    execute.view_functions[endpoint] = lambda **_kw: {"items": []}
    client = execute.test_client()
    for who, status in ((DEPLOYER_EMAIL, 200), (OPERATOR, 200), (PUSH_EMAIL, 403)):
        token = mint(google, url_of("execute"), who)
        answer = client.get("/api/catalog", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == status, (who, answer.json)
    projector = build("projector", monkeypatch)
    endpoint, _ = projector.url_map.bind("localhost").match("/api/projector/status", method="GET")
    projector.view_functions[endpoint] = lambda **_kw: {"reached": True}
    client = projector.test_client()
    for who, status in ((DEPLOYER_EMAIL, 403), (OPERATOR, 200), (PUSH_EMAIL, 403)):
        token = mint(google, url_of("projector"), who)
        answer = client.get("/api/projector/status", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == status, (who, answer.json)


def test_the_drainer_takes_operators_tokens_for_the_control_planes_url_on_its_spool_routes_only(
    offline: None, monkeypatch: pytest.MonkeyPatch, google: FakeGoogle
) -> None:
    """The console's /api/spool/* reaches the drainer through the control plane with the operator's own
    ID token (minted for execute's URL): the drainer accepts that audience there, for operators only,
    and nowhere else (/drain keeps its own audience)."""
    drainer = build("spool_drainer", monkeypatch)
    for path, method in (("/api/spool/subscriptions", "GET"), ("/drain", "POST")):
        endpoint, _ = drainer.url_map.bind("localhost").match(path, method=method)
        drainer.view_functions[endpoint] = lambda **_kw: {"reached": True}
    client = drainer.test_client()

    def call(method: str, path: str, audience: str, who: str) -> int:
        token = mint(google, url_of(audience), who)
        return int(client.open(path, method=method, json={}, headers={"Authorization": f"Bearer {token}"}).status_code)

    assert call("GET", "/api/spool/subscriptions", "execute", OPERATOR) == 200
    assert call("GET", "/api/spool/subscriptions", "spool_drainer", OPERATOR) == 200
    assert call("GET", "/api/spool/subscriptions", "execute", SCHEDULER_EMAIL) == 403  # not an operator
    assert call("GET", "/api/spool/subscriptions", "projector", OPERATOR) == 401  # another service's URL
    assert call("POST", "/drain", "execute", OPERATOR) == 401
    assert call("POST", "/drain", "spool_drainer", OPERATOR) == 200


def test_in_the_cloud_each_account_calls_only_its_roles_routes(
    offline: None, monkeypatch: pytest.MonkeyPatch, google: FakeGoogle
) -> None:
    """The role mapping Terraform configures (NOETL_INTERNAL_API_CALLERS, <role>=<email>) works: the
    worker's account cannot register a playbook or read a listener's configuration, the ingress's can
    read it and cannot report events, the operators cannot read it (403 forbidden_role)."""
    execute = build("execute", monkeypatch)
    adapter = execute.url_map.bind("localhost")
    for path, method in (("/api/catalog", "POST"), ("/api/internal/ingress/orders", "GET"), ("/api/events", "POST")):
        endpoint, _ = adapter.match(path, method=method)
        execute.view_functions[endpoint] = lambda **_kw: {"reached": True}
    client = execute.test_client()
    expected = {
        (email("worker"), "POST", "/api/catalog"): 403,
        (email("worker"), "GET", "/api/internal/ingress/orders"): 403,
        (email("worker"), "POST", "/api/events"): 200,
        (email("ingress"), "GET", "/api/internal/ingress/orders"): 200,
        (email("ingress"), "POST", "/api/events"): 403,
        (OPERATOR, "POST", "/api/catalog"): 200,
        (OPERATOR, "GET", "/api/internal/ingress/orders"): 403,
    }
    for (who, method, path), status in expected.items():
        token = mint(google, url_of("execute"), who)
        answer = client.open(path, method=method, json={}, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == status, (who, path, answer.json)
        if status == 403:
            assert answer.json["error"]["code"] == "forbidden_role"


# -- the environment -----------------------------------------------------------------------------------


def test_every_noetl_variable_terraform_sets_on_a_service_is_a_setting() -> None:
    known = {Settings.env_name(f) for f in Settings.model_fields}
    for key in SERVICES:
        env = terraform_env(key)
        assert set(env) <= known, f"{key}: {sorted(set(env) - known)}"
        Settings.from_env(env)  # every value is valid for its setting


@pytest.mark.parametrize("key", sorted(SERVICES))
def test_each_service_starts_with_the_environment_terraform_gives_it(
    key: str, offline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build(key, monkeypatch)
    response = app.test_client().get(ROUTES["health"]["path"])
    assert response.status_code == 200 and response.json["role"] == SERVICES[key]["role"]
    env = terraform_env(key)
    role = SERVICES[key]["role"]
    assert env["NOETL_ENVIRONMENT"] == "gcp"
    if role == "worker":
        assert env["NOETL_WORKER_POOL"] == SERVICES[key]["pool"]
        assert env["NOETL_PAYLOAD_BACKEND"] == "gcs" and env["NOETL_PAYLOAD_BUCKET"]
        assert env["NOETL_FRAMES_URL"] == url_of("frames")
        from noetl_cloud.worker.app import service_from_settings

        service = service_from_settings(Settings.from_env(env))
        assert service.payloads is not None and service.frames is not None
    if role in ("ingress", "spool_drainer", "subscription_runtime"):
        assert env["NOETL_SPOOL_BACKEND"] == "gcs" and env["NOETL_SPOOL_BUCKET"]
        assert env["NOETL_SPOOL_DRAINER_URL"] == url_of("spool_drainer")
    if role == "subscription_runtime":
        # gunicorn serves health only; the container's command runs the loop, wired from the same settings.
        from noetl_cloud.runtime.bootstrap import runtime_from_settings

        settings = Settings.from_env(env)
        assert settings.subscription_path == SERVICES[key]["subscription"]
        assert runtime_from_settings(settings).path == settings.subscription_path
