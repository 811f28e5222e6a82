"""What a first deploy must not trip on: files that stay out of commits and uploads, and the Pub/Sub
service agent, which a brand-new project does not have until it is asked for."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl_cloud.spec import parse_document
from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MODULES = INFRA / "modules"

# Paths an operator's checkout holds after `terraform init/apply` and `make install`.
SECRETS_AND_STATE = [
    "infra/environments/dev/terraform.tfvars",
    "infra/environments/prod/prod.auto.tfvars.json",
    "infra/environments/dev/terraform.tfstate",
    "infra/environments/dev/terraform.tfstate.backup",
    "infra/environments/dev/.terraform/providers/x",
    "infra/environments/dev/plan.tfplan",
    "local/.state/pg/data",
    "local/.state/tokens.json",
    "local/.state-infra6/secrets/keychain-pg",
    "local/.state-ci/env",
    ".venv/bin/python",
    "venv/bin/python",
    "shared/noetl_cloud.egg-info/PKG-INFO",
]
NEEDED = [
    "infra/environments/dev/terraform.tfvars.example",
    "infra/environments/dev/main.tf",
    "infra/modules/stack/main.tf",
    "cloudbuild.yaml",
    "pyproject.toml",
    "README.md",
    "shared/noetl_cloud/__init__.py",
    "functions/entrypoint.sh",
    "functions/Dockerfile",
    "tests/unit/test_infra.py",
    "functions/requirements.lock",
    "functions/build-requirements.lock",
    "local/docker-compose.yml",
]


def _ignored_by_git(paths: list[str]) -> set[str]:
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths),
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr
    return set(done.stdout.split())


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="not a git checkout (Cloud Build's upload leaves .git out, and its Python image has no git)",
)
def test_git_ignores_terraform_state_tfvars_and_provider_downloads_but_not_the_examples() -> None:
    assert _ignored_by_git(SECRETS_AND_STATE + NEEDED) == set(SECRETS_AND_STATE)


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
def test_gcloud_builds_submit_uploads_what_the_build_needs_and_no_state_or_tfvars(tmp_path: Path) -> None:
    """gcloud's own reading of .gcloudignore (``gcloud meta list-files-for-upload``, offline) over a tree
    holding both kinds of file."""
    for name in (".gcloudignore", ".gitignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    for path in SECRETS_AND_STATE + NEEDED + [".git/HEAD"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    listed = subprocess.run(
        ["gcloud", "meta", "list-files-for-upload", str(tmp_path)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    uploaded = set(listed.stdout.split())
    assert set(NEEDED) <= uploaded
    assert uploaded.isdisjoint([*SECRETS_AND_STATE, ".git/HEAD"]), uploaded & set(SECRETS_AND_STATE)


def test_the_pubsub_service_agent_is_created_before_any_grant_names_it() -> None:
    stack = terraform_support.parse(MODULES / "stack" / "main.tf")
    identities = [
        body
        for block in stack["resource"]
        for rtype, named in block.items()
        if rtype == "google_project_service_identity"
        for body in named.values()
    ]
    assert len(identities) == 1
    identity = identities[0]
    assert identity["service"] == "pubsub.googleapis.com" and identity["provider"] == "google-beta"
    assert "google_project_service.this" in str(identity["depends_on"])
    calls = terraform_support.folder((MODULES / "stack").resolve()).modules
    member = "serviceAccount:${google_project_service_identity.pubsub.email}"
    assert calls["pubsub"]["service_agent_member"] == member
    assert calls["iam"]["pubsub_service_agent"] == member
    # Nothing builds the agent's address from the project number any more.
    text = "\n".join(p.read_text() for p in INFRA.rglob("*.tf"))
    assert "service-${data.google_project" not in text
    # The resource is google-beta's: every root that uses the stack configures and pins that provider.
    for env in ("dev", "prod"):
        folder = INFRA / "environments" / env
        versions = terraform_support.parse(folder / "versions.tf")["terraform"][0]["required_providers"][0]
        assert versions["google-beta"]["source"] == "hashicorp/google-beta"
        assert versions["google-beta"]["version"] == versions["google"]["version"]
        providers = [name for block in terraform_support.parse(folder / "main.tf")["provider"] for name in block]
        assert sorted(providers) == ["google", "google-beta"]


def test_the_first_deploy_documents_are_valid_and_agree_with_the_walk() -> None:
    """docs/deploy.md registers these two documents and signs a delivery for the listener."""
    playbook_text = (ROOT / "docs" / "deploy" / "smoke.playbook.yaml").read_text()
    subscription_text = (ROOT / "docs" / "deploy" / "smoke.subscription.yaml").read_text()
    assert type(parse_document(playbook_text)).__name__ == "PlaybookDoc"
    assert type(parse_document(subscription_text)).__name__ == "SubscriptionDoc"
    playbook, subscription = yaml.safe_load(playbook_text), yaml.safe_load(subscription_text)
    spec = subscription["spec"]
    assert spec["dispatch"]["playbook"] == playbook["metadata"]["path"]
    walk = (ROOT / "docs" / "deploy.md").read_text()
    assert f'webhook_secrets = ["{spec["ingress"]["verify"]["secret"]}"]' in walk
    assert f"gcloud secrets versions add {spec['ingress']['verify']['secret']}" in walk
    assert f'"$INGRESS{spec["ingress"]["gateway_path"]}"' in walk
    assert spec["ingress"]["verify"]["type"] == "hmac_sha256" and spec["ingress"]["verify"]["prefix"] == "sha256="


def _stack_resources() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (rtype, name): body
        for path in sorted((MODULES / "stack").glob("*.tf"))
        for block in terraform_support.parse(path).get("resource", [])
        for rtype, named in block.items()
        for name, body in named.items()
    }


def test_every_secret_a_revision_names_is_readable_by_its_account_before_the_revision_is_made() -> None:
    """Cloud Run refuses a service, function or job revision whose account cannot read a secret its
    environment names ("Permission denied on secret"): each such grant exists, and is made first."""
    resources = _stack_resources()
    # The migration job's NOETL_DB_ADMIN_PASSWORD: granted in modules/iam (migrate_db_admin), so the
    # job waits for that module.
    job = resources[("google_cloud_run_v2_job", "migrate")]
    assert (
        'resource "google_secret_manager_secret_iam_member" "migrate_db_admin"'
        in (MODULES / "iam" / "main.tf").read_text()
    )
    assert "${module.iam}" in job["depends_on"]
    # roles.<role>.secret_env: one grant per (role, secret), to that role's account, on that secret.
    grant = resources[("google_secret_manager_secret_iam_member", "secret_env")]
    assert "var.roles[r].secret_env" in grant["for_each"] and "local.roles" in grant["for_each"]
    assert grant["secret_id"] == "${each.value.secret}" and grant["role"] == "roles/secretmanager.secretAccessor"
    assert grant["member"] == "serviceAccount:${module.iam.role_emails[each.value.role]}"
    calls = terraform_support.folder((MODULES / "stack").resolve()).modules
    for name in ("service", "function"):
        assert calls[name]["secret_env"] == "${var.roles[each.value.role].secret_env}", name
        assert "${google_secret_manager_secret_iam_member.secret_env}" in calls[name]["depends_on"], name
    # Nothing else puts a secret reference into a revision: the two modules read var.secret_env only.
    for module in ("cloud_run_service", "cloud_function"):
        text = (MODULES / module / "main.tf").read_text()
        refs = re.findall(r"secret\s*=\s*(\S+)", text)
        assert refs and all(ref.endswith(".value.secret") for ref in refs), (
            module,
            refs,
        )
