"""docs/deploy.md's walk from an empty project, held to the Terraform it drives: every output it reads
exists, its steps run in order as the identities the stack creates, its cost table prices the tiers and
sizing the environments set (from Google's pricing pages), and the deployer's grants are scoped to
resources wherever a resource-level binding exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MODULES = INFRA / "modules"
DEPLOY = (ROOT / "docs" / "deploy.md").read_text()
WALK = DEPLOY[DEPLOY.index("## From an empty project") : DEPLOY.index("### What each step costs")]
COSTS = DEPLOY[DEPLOY.index("### What each step costs") : DEPLOY.index("Tear down (dev):")]
ENVIRONMENTS = ("dev", "prod")
MONTH_HOURS = 730


def _blocks(path: Path, kind: str) -> dict[str, dict[str, Any]]:
    return {label: body for block in terraform_support.parse(path).get(kind, []) for label, body in block.items()}


def _resources() -> list[tuple[Path, str, str, dict[str, Any]]]:
    return [
        (path, rtype, name, body)
        for path in sorted(INFRA.rglob("*.tf"))
        for block in terraform_support.parse(path).get("resource", [])
        for rtype, named in block.items()
        for name, body in named.items()
    ]


# -- the walk ---------------------------------------------------------------------------------------


def test_every_terraform_output_the_docs_read_is_declared_by_both_environments() -> None:
    read = set(re.findall(r"terraform (?:-chdir=\S+ )?output (?:-raw |-json )?([a-z_]+)", DEPLOY))
    assert {"build_source_staging_dir", "cloudbuild_substitutions", "execute_url", "ingress_url"} <= read
    for env in ENVIRONMENTS:
        declared = set(_blocks(INFRA / "environments" / env / "outputs.tf", "output"))
        assert read <= declared, f"environments/{env} lacks outputs {sorted(read - declared)}"
        stack = set(_blocks(MODULES / "stack" / "outputs.tf", "output"))
        for name in read:
            assert _blocks(INFRA / "environments" / env / "outputs.tf", "output")[name]["value"] == (
                f"${{module.noetl.{name}}}"
            ), name
            assert name in stack


def test_the_walk_runs_its_steps_in_order() -> None:
    steps = [int(n) for n in re.findall(r"^# (\d)\. ", WALK, re.MULTILINE)]
    assert steps == list(range(7)), steps
    order = [
        "gcloud services enable",
        "gcloud storage buckets create",
        "cp terraform.tfvars.example terraform.tfvars",
        "\nterraform init -backend-config=",
        "\nterraform apply\n",
        "gcloud secrets versions add first-deploy-hmac",
        "gcloud builds submit --config cloudbuild.yaml",
        '-X POST "$EXECUTE/api/catalog"',
        '-H "x-signature: sha256=$sig"',
        '-H "x-signature: sha256=00"',
    ]
    # Each command as it is run (a line of its own where a comment could also name it).
    positions = [WALK.index(command) for command in order]
    assert positions == sorted(positions), [command for _, command in sorted(zip(positions, order, strict=True))]
    # The backend the init configures is the one the environments declare.
    for env in ENVIRONMENTS:
        assert "backend" in str(terraform_support.parse(INFRA / "environments" / env / "versions.tf")["terraform"])


def test_the_build_is_submitted_as_the_deployer_the_stack_creates() -> None:
    # The environments leave the stack's name_prefix at its default; the deployer's account id is
    # <prefix>-deployer (modules/iam).
    prefix = _blocks(MODULES / "stack" / "variables.tf", "variable")["name_prefix"]["default"]
    for env in ENVIRONMENTS:
        assert "name_prefix" not in _blocks(INFRA / "environments" / env / "main.tf", "module")["noetl"]
    iam = {k: v for b in terraform_support.parse(MODULES / "iam" / "main.tf")["locals"] for k, v in b.items()}
    assert '"${var.name_prefix}-deployer"' in str(iam["account_ids"])
    account = f"{prefix}-deployer@$PROJECT.iam.gserviceaccount.com"
    assert f'--service-account "projects/$PROJECT/serviceAccounts/{account}"' in WALK
    # The walk's operator is the one tfvars lists, and the identity that gets a token for it.
    assert '"serviceAccount:noetl-operator@<project>.iam.gserviceaccount.com"' in WALK
    assert WALK.count('noetl-operator@$PROJECT.iam.gserviceaccount.com"') == 2


# -- the cost table ---------------------------------------------------------------------------------

PRICING = {
    "Cloud SQL": "https://cloud.google.com/sql/pricing",
    "Cloud Run": "https://cloud.google.com/run/pricing",
    "Firestore": "https://cloud.google.com/firestore/pricing",
    "Pub/Sub": "https://cloud.google.com/pubsub/pricing",
}


def _rate(pattern: str) -> float:
    found = re.search(pattern, COSTS)
    assert found, f"the cost table has no {pattern}"
    return float(found.group(1))


def _cloudsql(env: str) -> dict[str, Any]:
    call = _blocks(INFRA / "environments" / env / "main.tf", "module")["noetl"]
    cloudsql: dict[str, Any] = call["cloudsql"]
    return cloudsql


def test_the_cost_table_cites_googles_pricing_pages() -> None:
    for product, url in PRICING.items():
        assert f"[{product}]({url})" in COSTS, product


def test_the_cloud_sql_lines_price_the_tiers_the_environments_set() -> None:
    vcpu_hour = _rate(r"\$(0\.\d+) / vCPU-hour")
    gb_hour = _rate(r"\$(0\.\d+) / GB-hour of memory")
    ssd = _rate(r"SSD \$(0\.\d+) / GB-month")
    stack_default = _blocks(MODULES / "stack" / "variables.tf", "variable")["cloudsql"]["type"]
    for env, label in (("dev", "dev"), ("prod", "prod")):
        sql = _cloudsql(env)
        tier = sql["tier"]
        match = re.fullmatch(r"db-custom-(\d+)-(\d+)", tier)
        assert match, tier
        cpus, memory_gb = int(match.group(1)), int(match.group(2)) / 1024
        row = next(line for line in COSTS.splitlines() if f"**Cloud SQL, {label}**" in line)
        assert f"`{tier}` ({cpus} vCPU, {memory_gb:g} GB)" in row, row
        regional = sql.get("availability_type") == "REGIONAL"
        assert ("regional (HA)" in row) == regional and ("zonal" in row) == (not regional)
        disk = sql.get("disk_size_gb", 10)
        assert f"{disk} GB SSD" in row
        copies = 2 if regional else 1
        monthly = copies * (MONTH_HOURS * (cpus * vcpu_hour + memory_gb * gb_hour) + disk * ssd)
        about = float(re.search(r"\*\*about \$(\d+)\*\*", row).group(1))  # type: ignore[union-attr]
        assert monthly <= about <= monthly * 1.1, (env, monthly, about)  # + backups and PITR logs
    assert "db-custom-1-3840" in str(stack_default)  # the dev line is also the stack's default


def test_the_warm_cloud_run_line_names_every_role_billed_while_idle() -> None:
    """A role with cpu_idle = false is billed for its instances' whole life: the runtime (min 1), and
    execute and frames, which the scheduler calls every minute. Each is named on the warm line, priced
    at the role's default size."""
    roles = _blocks(MODULES / "stack" / "variables.tf", "variable")["roles"]
    warm = sorted(r for r, v in roles["default"].items() if v.get("cpu_idle") is False)
    assert warm == ["execute", "frames", "subscription_runtime"]
    row = next(line for line in COSTS.splitlines() if "**Cloud Run, instances kept warm**" in line)
    for role in ("execute", "frames"):
        assert f"`{role}`" in row
    assert "`runtime_subscriptions` entry" in row
    # The roles the scheduler calls every minute are the ones the line says keep an instance up.
    schedule = terraform_support.parse(MODULES / "stack" / "maintenance_schedule.tf")["locals"][0]
    every_minute = {j["route"] for j in schedule["maintenance_schedule"].values() if j["schedule"] == "* * * * *"}
    assert {"outbox_sweep", "command_reaper", "subscription_tick", "frame_reaper"} <= every_minute
    cpu_second = _rate(r"\$(0\.\d+) / vCPU-second \+")
    gib_second = _rate(r"\+ \$(0\.\d+) / GiB-second for the whole life")
    # Priced at the roles' default size (1 vCPU, 512 MiB), which none of the warm roles overrides.
    text = (MODULES / "stack" / "variables.tf").read_text()
    assert re.search(r'cpu\s+= optional\(string, "1"\)', text) and re.search(
        r'memory\s+= optional\(string, "512Mi"\)', text
    )
    assert not any({"cpu", "memory"} & set(roles["default"][r]) for r in warm)
    assert "(1 vCPU, 512 MiB)" in row
    monthly = MONTH_HOURS * 3600 * (1 * cpu_second + 0.5 * gib_second)
    about = float(re.search(r"\*\*about \$(\d+) per instance\*\*", row).group(1))  # type: ignore[union-attr]
    assert abs(monthly - about) <= 2, (monthly, about)


# -- the deployer's grants --------------------------------------------------------------------------

# Roles granted on the project only because no narrower resource takes them: listing Cloud Run
# services and Cloud Functions, writing build logs, and the write-only telemetry agents.
PROJECT_ONLY = {
    "roles/run.viewer",
    "roles/logging.logWriter",
    "roles/cloudfunctions.viewer",
    "roles/cloudtrace.agent",
    "roles/monitoring.metricWriter",
}


def test_project_level_grants_are_conditioned_or_have_no_resource_level_binding() -> None:
    seen: set[str] = set()
    for path, rtype, name, body in _resources():
        where = f"{path.relative_to(INFRA)}: {rtype}.{name}"
        assert rtype not in ("google_project_iam_binding", "google_project_iam_policy"), f"{where} is authoritative"
        if rtype != "google_project_iam_member":
            continue
        if body.get("condition"):
            # Conditioned on the one Cloud SQL instance or the one Firestore database.
            assert "resource.name ==" in str(body["condition"]) or "_condition.expression" in str(body["condition"])
            continue
        roles = set(re.findall(r"roles/[\w.]+", str(body["role"]) + str(body.get("for_each", ""))))
        assert roles and roles <= PROJECT_ONLY, f"{where} grants {sorted(roles - PROJECT_ONLY)} on the whole project"
        seen |= roles
    assert seen == PROJECT_ONLY


def test_every_other_deployer_grant_names_one_resource() -> None:
    kinds: set[str] = set()
    for path, rtype, name, body in _resources():
        if "deployer" not in str(body.get("member", "")) + str(body.get("developers", "")):
            continue
        kinds.add(rtype)
        if rtype == "google_project_iam_member":
            roles = set(re.findall(r"roles/[\w.]+", str(body["role"]) + str(body.get("for_each", ""))))
            assert roles <= {"roles/run.viewer", "roles/logging.logWriter", "roles/cloudfunctions.viewer"}, (path, name)
    assert kinds == {
        "google_project_iam_member",
        "google_storage_bucket_iam_member",  # the build-source bucket: read the upload, add archives
        "google_artifact_registry_repository_iam_member",  # the stack's repository
        "google_service_account_iam_member",  # actAs on each runtime account (and itself, functions)
        "google_cloud_run_v2_job_iam_member",  # the migration job
    }, kinds
    # run.developer / cloudfunctions.developer per service and function (the modules' developers list).
    for module in ("cloud_run_service", "cloud_function"):
        text = (MODULES / module / "main.tf").read_text()
        assert "for_each = toset(var.developers)" in text or "for_each = var.developers" in text, module
