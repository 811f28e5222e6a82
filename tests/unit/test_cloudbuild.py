"""cloudbuild.yaml: every file a step names exists, every role is rolled out, nothing project-specific is written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_infra import _roles

ROOT = Path(__file__).resolve().parents[2]
CLOUDBUILD = ROOT / "cloudbuild.yaml"


def _build() -> dict[str, Any]:
    return yaml.safe_load(CLOUDBUILD.read_text())


def _steps() -> dict[str, dict[str, Any]]:
    return {step["id"]: step for step in _build()["steps"]}


def _script(step: dict[str, Any]) -> str:
    return "\n".join(str(a) for a in step.get("args", []))


def test_steps_are_in_order_lint_build_push_migrate_deploy_smoke() -> None:
    ids = list(_steps())
    for before, after in [
        ("lint-and-unit-tests", "build-image"),
        ("build-image", "push-image"),
        ("push-image", "migrate-database"),
        ("migrate-database", "deploy-execute"),
        ("deploy-subscription_runtime", "smoke-test-ingress"),
        ("smoke-test-ingress", "smoke-test-control-plane"),
    ]:
        assert ids.index(before) < ids.index(after)
    # No waitFor: the smoke tests run after every step before them, i.e. after every rollout.
    assert ids[-2:] == ["smoke-test-ingress", "smoke-test-control-plane"]
    assert all("waitFor" not in _steps()[i] for i in ids[-2:])


def test_referenced_files_exist() -> None:
    steps = _steps()
    build = steps["build-image"]["args"]
    dockerfile = next(a.split("=", 1)[1] for a in build if a.startswith("--file="))
    assert (ROOT / dockerfile).is_file()
    assert build[-1] == "."
    lint = _script(steps["lint-and-unit-tests"])
    for line in lint.splitlines():
        words = shlex.split(line)
        if len(words) > 2 and words[0].endswith("/ruff") and words[1] == "check":
            for target in words[2:]:
                assert (ROOT / target).exists(), target
        if words and words[0].endswith("/pytest"):
            for target in (w for w in words[1:] if not w.startswith("-")):
                assert (ROOT / target).exists(), target
    assert "pytest" in lint and "ruff check" in lint
    assert (ROOT / "pyproject.toml").is_file()
    fmt = steps["terraform-fmt"]["args"]
    assert (ROOT / fmt[-1]).is_dir()
    # Every deploy step checks the entry point of its role, and every one exists now.
    for role in _roles():
        script = _script(steps[f"deploy-{role}"])
        path = f"functions/{role}/main.py"
        assert f"test -f {path}" in script
        assert (ROOT / path).is_file(), path


def test_every_service_of_every_role_is_rolled_out() -> None:
    steps = _steps()
    module = (ROOT / "infra/modules/cloud_run_service/main.tf").read_text()
    # The labels the deploy steps select by are the ones the module puts on every service.
    assert '"noetl-stack" = var.stack, "noetl-role" = replace(var.role, "_", "-")' in module
    assert "stack                 = var.name_prefix" in (ROOT / "infra/modules/stack/main.tf").read_text()
    for role in _roles():
        step = steps.get(f"deploy-{role}")
        assert step is not None, f"no deploy step for {role}"
        script = _script(step)
        label = role.replace("_", "-")
        selector = f'--filter "metadata.labels.noetl-stack=${{_NAME_PREFIX}} AND metadata.labels.noetl-role={label}"'
        assert f'gcloud run services list --region "${{_REGION}}" {selector}' in script
        assert "for service in $$services; do" in script
        assert 'gcloud run services update "$$service" --region "${_REGION}" --image "${_IMAGE}:${BUILD_ID}"' in script
        assert step["waitFor"] == ["migrate-database"]
        # execute and ingress always exist (the smoke test needs ingress): none found is a failure.
        if role in ("execute", "ingress"):
            assert "exit 1; fi" in script
    deploy_steps = {i.removeprefix("deploy-") for i in steps if i.startswith("deploy-")}
    assert deploy_steps == set(_roles())
    built = {p.parent.name for p in (ROOT / "functions").glob("*/main.py")}
    assert built == deploy_steps


def test_migration_runs_as_the_cloud_run_job_terraform_creates() -> None:
    script = _script(_steps()["migrate-database"])
    assert 'gcloud run jobs update "${_NAME_PREFIX}-migrate"' in script
    assert 'gcloud run jobs execute "${_NAME_PREFIX}-migrate"' in script and "--wait" in script
    stack = (ROOT / "infra/modules/stack/main.tf").read_text()
    assert 'name                = "${var.name_prefix}-migrate"' in stack
    assert 'command = ["/bin/sh", "-c"]' in stack
    assert 'args    = ["python -m noetl_cloud.dbaccess && exec noetl-cloud db upgrade"]' in stack


def test_smoke_tests_call_the_urls_terraform_configures() -> None:
    ingress = _script(_steps()["smoke-test-ingress"])
    assert 'url="https://${_NAME_PREFIX}-ingress-${PROJECT_NUMBER}.${_REGION}.run.app"' in ingress
    assert "/healthz" in ingress and "curl --fail" in ingress
    control = _script(_steps()["smoke-test-control-plane"])
    assert 'url="https://${_NAME_PREFIX}-execute-${PROJECT_NUMBER}.${_REGION}.run.app"' in control
    assert 'gcloud auth print-identity-token --audiences "$$url"' in control
    assert '"$$url/api/catalog"' in control
    # The same deterministic URL form as the stack's, and the paths are routes Terraform names.
    stack = (ROOT / "infra/modules/stack/main.tf").read_text()
    assert '"https://${s.name}-${data.google_project.this.number}.${var.region}.run.app"' in stack
    assert 'health              = { role = "*", method = "GET", path = "/healthz" }' in stack


def test_no_step_calls_a_service_that_cloud_build_cannot_reach() -> None:
    """Cloud Build's traffic comes from outside the VPC: a service with internal-only ingress (worker,
    projector, runtimes) is never curled; only the roles the stack opens to all traffic are."""
    roles = _roles()
    reachable = {r for r, sizing in roles.items() if sizing.get("ingress") == "INGRESS_TRAFFIC_ALL"}
    assert {"ingress", "execute"} <= reachable and "projector" not in reachable
    for step_id, step in _steps().items():
        for role in re.findall(r"https://\$\{_NAME_PREFIX\}-([a-z-]+)-\$\{PROJECT_NUMBER\}", _script(step)):
            assert role.replace("-", "_") in reachable, f"{step_id} calls {role}, which is internal-only"


def _run_smoke(tmp_path: Path, services: str, catalog_status: int) -> subprocess.CompletedProcess[str]:
    """The smoke-test-control-plane script as Cloud Build runs it, with gcloud, curl and sleep faked."""
    script = _script(_steps()["smoke-test-control-plane"]).split("\n", 1)[1]
    for name, value in {"${_REGION}": "test-region", "${_NAME_PREFIX}": "noetl", "${PROJECT_NUMBER}": "42"}.items():
        script = script.replace(name, value)
    script = script.replace("$$", "$").replace("/workspace", str(tmp_path))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        "gcloud": f"""case "$*" in
  "run services list"*) printf '{services}' ;;
  "auth print-identity-token --audiences https://noetl-execute-42.test-region.run.app") echo tok ;;
  *) echo "unexpected gcloud $*" >&2; exit 2 ;;
esac""",
        "curl": f"""echo "$*" >> {tmp_path}/curl.log
test {catalog_status} = 200 || exit 22
echo '{{"items": []}}'""",
        "sleep": "exit 0",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        ["bash", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )


def test_the_control_plane_smoke_test_passes_a_correct_deploy(tmp_path: Path) -> None:
    ready = "noetl-execute\\trev-2\\trev-2\\nnoetl-worker-shared\\trev-5\\trev-5\\n"
    done = _run_smoke(tmp_path, ready, 200)
    assert done.returncode == 0, done.stderr
    assert "execute: catalog read" in done.stdout
    calls = (tmp_path / "curl.log").read_text()
    assert "Authorization: Bearer tok" in calls and "https://noetl-execute-42.test-region.run.app/api/catalog" in calls


def test_the_control_plane_smoke_test_fails_a_revision_that_is_not_ready_or_a_dead_api(tmp_path: Path) -> None:
    stale = "noetl-execute\\trev-2\\trev-2\\nnoetl-projector\\trev-3\\trev-2\\n"
    (tmp_path / "stale").mkdir()
    done = _run_smoke(tmp_path / "stale", stale, 200)
    assert done.returncode == 1
    assert "noetl-projector: revision rev-3 is not ready" in done.stderr
    (tmp_path / "down").mkdir()
    down = _run_smoke(tmp_path / "down", "noetl-execute\\trev-2\\trev-2\\n", 503)
    assert down.returncode == 1 and "execute did not answer" in down.stderr
    assert len((tmp_path / "down" / "curl.log").read_text().splitlines()) == 6  # every attempt made
    (tmp_path / "none").mkdir()
    none = _run_smoke(tmp_path / "none", "", 200)  # no service found: not green
    assert none.returncode == 1 and "no service labelled noetl-stack=noetl" in none.stderr


def test_substitutions_and_no_project_ids() -> None:
    build = _build()
    subs = build["substitutions"]
    assert {"_REGION", "_REPOSITORY", "_NAME_PREFIX"} <= set(subs)
    assert subs["_REGION"] == ""  # required at submit time, never a default region
    assert subs["_IMAGE"] == "${_REGION}-docker.pkg.dev/${PROJECT_ID}/${_REPOSITORY}/${_IMAGE_NAME}"
    assert build["options"]["dynamicSubstitutions"] is True
    text = "\n".join(line for line in CLOUDBUILD.read_text().splitlines() if not line.lstrip().startswith("#"))
    # Every project reference is the built-in substitution.
    for match in re.finditer(r"projects/([^/\s\"]+)", text):
        assert match.group(1).startswith("$"), match.group(0)
    assert not re.search(r"\b(?:us|europe|asia)-[a-z]+\d\b", text.replace("us-docker", ""))
    # Shell variables are escaped ($$), so Cloud Build substitutes only its own names.
    used = set(re.findall(r"(?<!\$)\$\{?([A-Z_][A-Z0-9_]*)", text))
    assert used <= set(subs) | {"PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID"}, used - set(subs)
