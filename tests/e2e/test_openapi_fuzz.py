"""Property-based requests against every role of the running local stack (issue #21 item 9).

Each role serves its OpenAPI document at ``GET /api/openapi.json`` (behind its authentication); it must be
the committed one (docs/openapi/). schemathesis then draws requests from it, valid ones and ones that break
the schema (types, bounds, missing fields, bad path parameters), a bounded number per operation
(``NOETL_TEST_FUZZ_EXAMPLES``, default 25), authenticated as a caller role the operation admits
(``noetl_cloud.auth.roles.POLICY``: the operator's token where it may, else the first role admitted, each
with the stack's token of that purpose), plus one request without
credentials per operation, which a secured operation must refuse (401). Every answer must be below 500,
every error answer must be in the JSON error model, and every role must still be healthy afterwards. The
requests sent per role are in the run's summary ("openapi fuzz").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from noetl_cloud.auth.roles import OPERATOR, policy_for
from noetl_cloud.demo.setup import LISTENERS
from noetl_cloud.local import tokens
from noetl_cloud.local.layout import ROLE_PORTS
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.openapi.roles import ROLES
from tests.e2e.fuzz_report import RoleRun, runs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("NOETL_TEST_FUZZ_EXAMPLES") or 25)
TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def stack_roles(local_env: dict[str, str]) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Every role of the local stack (started if missing): its tokens by purpose and each role's base URL."""
    stack = LocalStack.from_env(
        {**os.environ, "NOETL_LOCAL_STATE_DIR": os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))}
    )
    stack.up(echo=lambda _line: None, roles=list(ROLE_PORTS))
    keys = tokens.ensure_tokens(stack.state_dir)
    yield keys, {role: f"http://127.0.0.1:{stack.port_base + port}" for role, port in ROLE_PORTS.items()}
    unhealthy = [s.name for s in stack.status(every_role=True) if not s.healthy]
    assert unhealthy == [], f"unhealthy after the fuzz run: {unhealthy}"


def credentials(
    role: str, keys: dict[str, str], method: str = "GET", path: str = "/api/openapi.json"
) -> dict[str, str]:
    """What a caller of ``method path`` presents: the push token for the worker and a push endpoint;
    elsewhere the token of a caller role the operation admits (the operator's when it may), so the
    request gets past authorization to the handler."""
    if role == "worker" or (role == "projector" and path == "/"):  # the push endpoint's (and the worker's API)
        return {"Authorization": f"Bearer {keys[f'{role}_push']}"}
    admitted: frozenset[str] = frozenset()
    for (declared, rule), allowed in policy_for(role).items():
        if declared == method.upper() and re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule) == path:
            admitted = allowed
    purpose = OPERATOR if OPERATOR in admitted or not admitted else sorted(admitted & set(tokens.CALLER_PURPOSES))[0]
    return {"Authorization": f"Bearer {keys[purpose]}"}


def problem(response: requests.Response) -> str | None:
    """Why an answer is wrong: a 5xx, or an error answer outside the JSON error model."""
    where = f"{response.request.method} {response.request.path_url[:200]} -> {response.status_code}"
    if response.status_code >= 500:
        return f"{where}: {response.text[:300]}"
    if response.status_code < 400:
        return None
    try:
        body: Any = response.json()
    except ValueError:
        return f"{where}: error body is not JSON: {response.text[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not (isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str)):
        return f"{where}: error body outside the error model: {response.text[:200]!r}"
    return None


def fuzz(run: RoleRun, operation: Any, base_url: str, headers: dict[str, str], session: requests.Session) -> None:
    """Send ``EXAMPLES`` drawn requests of ``operation`` (valid and schema-breaking), recording each answer.
    The ingress's deliveries go to the demo's listeners too, so they reach verification, not only 404."""
    fixed: list[dict[str, Any] | None] = [None]
    if operation.path == "/ingress/{listener}":
        fixed += [{"listener": item.listener} for item in LISTENERS]
    strategies = [
        operation.as_strategy(mode, path_parameters=path)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        for path in fixed
    ]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(strategies))
    def send(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, session=session, timeout=TIMEOUT_S)
        record(run, response)

    send()


def record(run: RoleRun, response: requests.Response) -> None:
    run.requests += 1
    key = str(response.status_code)
    run.statuses[key] = run.statuses.get(key, 0) + 1
    found = problem(response)
    if found:
        run.problems.append(found)


@pytest.mark.parametrize("role", ROLES)
def test_fuzzing_a_role_gets_no_5xx_and_every_error_in_the_json_error_model(
    role: str, stack_roles: tuple[dict[str, str], dict[str, str]], request: pytest.FixtureRequest
) -> None:
    keys, urls = stack_roles
    base_url, headers = urls[role], credentials(role, keys)
    served = requests.get(f"{base_url}/api/openapi.json", headers=headers, timeout=TIMEOUT_S)
    assert served.status_code == 200, served.text
    committed = json.loads((ROOT / "docs" / "openapi" / f"{role}.json").read_text(encoding="utf-8"))
    assert served.json() == committed, f"the running {role} serves another document than docs/openapi/{role}.json"

    schema = schemathesis.openapi.from_dict(committed)
    run = runs(request.config)[role] = RoleRun()
    secured = refused = 0
    with requests.Session() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            run.operations += 1
            fuzz(run, operation, base_url, credentials(role, keys, operation.method, operation.path), session)
            # and once without credentials: refused in the error model where the route is secured
            unauthenticated = operation.Case(path_parameters=_sample_path(operation))
            answer = unauthenticated.call(base_url=base_url, session=session, timeout=TIMEOUT_S)
            record(run, answer)
            if committed["paths"][operation.path][operation.method.lower()].get("security"):
                refused += answer.status_code == 401
                secured += 1
        health = session.get(f"{base_url}/healthz", timeout=TIMEOUT_S)
    print(run.line(role))
    assert health.status_code == 200
    assert run.requests >= run.operations * 2
    assert run.problems == []
    assert refused == secured, f"{secured - refused} secured operations answered a caller without credentials"


def _sample_path(operation: Any) -> dict[str, Any]:
    samples = {"integer": 1, "string": "sample"}
    values = {}
    for parameter in operation.path_parameters:
        kind = parameter.definition.get("schema", {}).get("type", "string")
        values[parameter.name] = samples.get(kind, "sample")
    return values
