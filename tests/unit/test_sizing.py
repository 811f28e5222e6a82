"""Sizing from one place (infra/modules/sizing): the module is applied by the real ``terraform`` binary.

The module holds no provider, so ``terraform init`` downloads nothing; its output preconditions are
what refuses a plan whose Cloud Run concurrency, push ack deadlines or database pools do not fit.
The stack's wiring (every number a service, subscription or job gets comes from the module) and the
container's side (gunicorn's threads) are checked after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest

from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
STACK = INFRA / "modules" / "stack"
SIZING = INFRA / "modules" / "sizing"
TERRAFORM = shutil.which("terraform")
ENV = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "NO_COLOR": "1"}

pytestmark = pytest.mark.skipif(TERRAFORM is None, reason="terraform is not installed (docs/deploy.md)")


def _stack_variable(name: str) -> dict[str, Any]:
    variables = {
        k: v for block in terraform_support.parse(STACK / "variables.tf").get("variable", []) for k, v in block.items()
    }
    return variables[name]


def _optional_defaults(type_text: str) -> dict[str, Any]:
    """``name = optional(type, default)`` of an object type: the numbers, which sizing reads."""
    return {
        name: float(value) if "." in value else int(value)
        for name, value in re.findall(r"(\w+)\s*=\s*optional\(number,\s*([0-9.]+)\)", type_text)
    }


def _sizing_roles(roles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A roles map as the stack passes it to modules/sizing: each role's numbers, defaults filled in."""
    defaults = _optional_defaults(_stack_variable("roles")["type"])
    keys = ("max_instances", "concurrency", "timeout_seconds", "db_pool_size", "db_max_overflow")
    return {role: {k: {**defaults, **given}[k] for k in keys} for role, given in roles.items()}


def _database(cloudsql: dict[str, Any]) -> dict[str, Any]:
    defaults = _optional_defaults(_stack_variable("cloudsql")["type"])
    merged = {**defaults, **cloudsql}
    # local.migrate_connections of modules/stack
    stack_locals = {k: v for b in terraform_support.parse(STACK / "main.tf").get("locals", []) for k, v in b.items()}
    return {
        "max_connections": merged["max_connections"],
        "reserved_connections": merged["reserved_connections"],
        "migrate_connections": stack_locals["migrate_connections"],
    }


@pytest.fixture(scope="module")
def sizing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Apply modules/sizing to a roles map and a database; answer its outputs or Terraform's error text."""
    work = tmp_path_factory.mktemp("sizing")
    shutil.copytree(SIZING, work, dirs_exist_ok=True)
    assert TERRAFORM is not None
    init = subprocess.run(
        [TERRAFORM, "init", "-input=false", "-backend=false"], cwd=work, env=ENV, capture_output=True, text=True
    )
    assert init.returncode == 0, init.stdout + init.stderr
    runs = iter(range(1000))

    def apply(roles: dict[str, Any], database: dict[str, Any]) -> dict[str, Any] | str:
        run = next(runs)
        variables = work / f"run{run}.tfvars.json"
        variables.write_text(json.dumps({"roles": roles, "database": database}))
        state = work / f"run{run}.tfstate"
        done = subprocess.run(
            [
                TERRAFORM,
                "apply",
                "-auto-approve",
                "-input=false",
                "-no-color",
                f"-state={state}",
                f"-var-file={variables}",
            ],
            cwd=work,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            return re.sub(r"\s+", " ", done.stderr.replace("│", " "))
        out = subprocess.run(
            [TERRAFORM, "output", "-json", f"-state={state}"], cwd=work, env=ENV, capture_output=True, text=True
        )
        return {name: value["value"] for name, value in json.loads(out.stdout).items()}

    yield apply


def test_the_default_roles_fit_the_default_instance_and_their_containers(sizing: Any) -> None:
    roles = _sizing_roles(_stack_variable("roles")["default"])
    outputs = sizing(roles, _database({}))
    assert isinstance(outputs, dict), outputs
    # gunicorn serves what Cloud Run sends: one thread per concurrent request, every HTTP role.
    assert outputs["gunicorn_threads"] == {r: s["concurrency"] for r, s in roles.items() if r != "subscription_runtime"}
    # A command may run its whole timeout before Pub/Sub delivers it again.
    assert outputs["push_ack_deadline_seconds"] == {
        "worker": roles["worker"]["timeout_seconds"],
        "projector": roles["projector"]["timeout_seconds"],
    }
    assert outputs["push_ack_deadline_seconds"]["worker"] == 600
    # Scheduler waits as long as the service may answer (within 15..1800 s).
    assert outputs["scheduler_attempt_deadline_seconds"]["execute"] == roles["execute"]["timeout_seconds"]
    assert outputs["scheduler_attempt_deadline_seconds"]["spool_drainer"] == roles["spool_drainer"]["timeout_seconds"]
    # The formula: sum over the control plane of max_instances x (pool + overflow) + migrate + reserve.
    db = outputs["db_connections"]
    expected = {
        r: roles[r]["max_instances"] * (roles[r]["db_pool_size"] + roles[r]["db_max_overflow"])
        for r in ("execute", "frames", "projector")
    }
    assert db["by_role"] == expected
    database = _database({})
    assert db["total"] == sum(expected.values()) + database["migrate_connections"] + database["reserved_connections"]
    assert db["total"] <= db["max_connections"] == 200


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_example_environments_fit(sizing: Any, env: str) -> None:
    example = hcl2.loads((INFRA / "environments" / env / "terraform.tfvars.example").read_text())
    call = terraform_support.folder((INFRA / "environments" / env).resolve()).modules["noetl"]
    outputs = sizing(_sizing_roles(example["roles"]), _database(call.get("cloudsql", {})))
    assert isinstance(outputs, dict), outputs
    assert outputs["db_connections"]["total"] <= outputs["db_connections"]["max_connections"]


def test_pools_that_outgrow_max_connections_fail_the_plan(sizing: Any) -> None:
    """The issue's numbers: three control-plane roles x 10 instances x (5 + 2) = 210 > 200."""
    roles = _sizing_roles(
        {r: {"max_instances": 10, "db_pool_size": 5, "db_max_overflow": 2} for r in ("execute", "frames", "projector")}
    )
    error = sizing(roles, {"max_connections": 200})
    assert isinstance(error, str) and "Control-plane connections exceed the instance" in error
    assert "= 222 > max_connections 200" in error  # 210 + migrate 2 + reserve 10
    # The same roles on an instance with room pass.
    outputs = sizing(roles, {"max_connections": 250})
    assert isinstance(outputs, dict) and outputs["db_connections"]["total"] == 222


def test_a_worker_timeout_beyond_the_longest_ack_deadline_fails_the_plan(sizing: Any) -> None:
    roles = _sizing_roles({"execute": {}, "worker": {"timeout_seconds": 900}})
    error = sizing(roles, {"max_connections": 200})
    assert isinstance(error, str) and "timeout_seconds of worker and projector must be 10..600" in error
    assert isinstance(
        sizing(_sizing_roles({"execute": {}, "worker": {"timeout_seconds": 600}}), {"max_connections": 200}), dict
    )


# -- every consumer of a number takes it from modules/sizing ------------------------------------------


def test_the_stack_configures_services_subscriptions_jobs_and_the_instance_from_the_sizing() -> None:
    stack = terraform_support.folder(STACK.resolve())
    call = stack.modules["sizing"]
    assert call["source"] == "../sizing" and call["roles"] == "${var.roles}"
    assert call["database"]["max_connections"] == "${var.cloudsql.max_connections}"
    text = (STACK / "main.tf").read_text()
    env = text[text.index("service_env = {") : text.index("maintenance_jobs = {")]
    # Last in the merge: a role's env cannot override it (and the roles validation refuses it).
    last = r"var\.roles\[s\.role\]\.env,\n\s*#[^\n]*\n\s*contains\(keys\(module\.sizing\.gunicorn_threads\), s\.role\)"
    assert re.search(last, env)
    assert "NOETL_DB_POOL_SIZE    = tostring(var.roles[s.role].db_pool_size)" in env
    assert any("GUNICORN_THREADS" in v["condition"] for v in _stack_variable("roles")["validation"])
    pools = stack.modules["pubsub"]["pools"]
    assert 'module.sizing.push_ack_deadline_seconds["worker"]' in pools
    assert (
        "module.sizing.push_ack_deadline_seconds[local.routes.projector_push.role]"
        in stack.modules["pubsub"]["events_push"]
    )
    jobs = stack.locals["scheduler_jobs"]
    assert jobs.count("module.sizing.scheduler_attempt_deadline_seconds[") == 2
    assert stack.modules["cloudsql"]["instance"]["max_connections"] == "${var.cloudsql.max_connections}"
    migrate = text[text.index('resource "google_cloud_run_v2_job" "migrate"') :]
    assert "NOETL_DB_POOL_SIZE    = tostring(local.migrate_connections)" in migrate
    assert 'NOETL_DB_MAX_OVERFLOW = "0"' in migrate
    pubsub = (INFRA / "modules" / "pubsub" / "main.tf").read_text()
    assert "coalesce(p.ack_deadline_seconds, var.delivery.ack_deadline_seconds)" in pubsub
    assert "coalesce(e.ack_deadline_seconds, var.delivery.ack_deadline_seconds)" in pubsub


def test_the_entrypoint_starts_gunicorn_with_the_threads_it_is_given(tmp_path: Path) -> None:
    """functions/entrypoint.sh passes GUNICORN_THREADS (the stack sets it to the concurrency) to gunicorn."""
    fake = tmp_path / "gunicorn"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "NOETL_ROLE": "execute", "NOETL_APP_DIR": str(ROOT), "PORT": "9"}
    entrypoint = ROOT / "functions" / "entrypoint.sh"
    given = subprocess.run(["sh", entrypoint], env={**env, "GUNICORN_THREADS": "20"}, capture_output=True, text=True)
    assert given.returncode == 0, given.stderr
    assert "--threads 20" in given.stdout and "--workers 1" in given.stdout
    unset = subprocess.run(["sh", entrypoint], env=env, capture_output=True, text=True)
    assert "--threads 8" in unset.stdout
