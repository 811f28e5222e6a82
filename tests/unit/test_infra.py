"""The Terraform under infra/, parsed with python-hcl2: least privilege and completeness, proven statically.

"Every role" comes from the default of the stack's ``roles`` map; every role that has an entry point
in ``functions/`` must be in it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

from noetl_cloud.settings import Settings
from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MODULES = INFRA / "modules"
STACK = MODULES / "stack"
TF_FILES = sorted(INFRA.rglob("*.tf"))
REQUIRED_MODULES = ("pubsub", "spool_bucket", "cloudsql", "firestore", "cloud_run_service", "scheduler", "iam")
REGION = re.compile(
    r"\b(?:us|europe|asia|australia|northamerica|southamerica|me|africa)-(?:north|south|east|west|central|northeast|"
    r"northwest|southeast|southwest)\d\b"
)


_parse = terraform_support.parse


def _blocks(path: Path, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, body) of each ``kind`` block with one label (variable, output, module)."""
    return [(label, body) for block in _parse(path).get(kind, []) for label, body in block.items()]


def _resources(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (rtype, name, body)
        for block in _parse(path).get("resource", [])
        for rtype, named in block.items()
        for name, body in named.items()
    ]


def _all_resources() -> list[tuple[Path, str, str, dict[str, Any]]]:
    return [(path, *res) for path in TF_FILES for res in _resources(path)]


def _module_calls(path: Path) -> dict[str, dict[str, Any]]:
    return dict(_blocks(path, "module"))


def _roles() -> dict[str, Any]:
    variables = dict(_blocks(STACK / "variables.tf", "variable"))
    return variables["roles"]["default"]


# -- shape of every module ------------------------------------------------------------------------


def test_every_module_exists_with_the_registry_layout() -> None:
    for name in (*REQUIRED_MODULES, "stack"):
        for file in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
            assert (MODULES / name / file).is_file(), f"modules/{name}/{file} is missing"
    for env in ("dev", "prod"):
        for file in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "terraform.tfvars.example"):
            assert (INFRA / "environments" / env / file).is_file(), f"environments/{env}/{file} is missing"


@pytest.mark.parametrize("path", TF_FILES, ids=lambda p: str(p.relative_to(INFRA)))
def test_every_tf_file_parses(path: Path) -> None:
    assert isinstance(_parse(path), dict)


def test_every_variable_has_a_type_and_a_description() -> None:
    count = 0
    for path in TF_FILES:
        for name, body in _blocks(path, "variable"):
            count += 1
            where = f"{path.relative_to(INFRA)}: variable {name}"
            assert body.get("type"), f"{where} has no type"
            assert str(body.get("description", "")).strip(), f"{where} has no description"
    assert count > 50


def test_every_output_has_a_description() -> None:
    for path in TF_FILES:
        for name, body in _blocks(path, "output"):
            assert str(body.get("description", "")).strip(), f"{path.relative_to(INFRA)}: output {name}"


def test_every_versions_tf_pins_the_google_provider() -> None:
    roots = {p.parent for p in TF_FILES}
    for folder in roots:
        versions = _parse(folder / "versions.tf")["terraform"][0]
        if folder == MODULES / "sizing":
            # Arithmetic only: no provider, so tests/unit/test_sizing.py can init and apply it offline.
            assert "required_providers" not in versions and versions["required_version"]
            assert not any(_parse(p).get(k) for p in folder.glob("*.tf") for k in ("resource", "data"))
            continue
        google = versions["required_providers"][0]["google"]
        assert google["source"] == "hashicorp/google"
        assert re.fullmatch(r">= 6\.\d+, < 7\.0", google["version"]), google["version"]
        assert versions["required_version"]


def test_environments_compose_the_stack_and_share_its_role_type() -> None:
    stack_type = dict(_blocks(STACK / "variables.tf", "variable"))["roles"]["type"]
    for env in ("dev", "prod"):
        folder = INFRA / "environments" / env
        call = _module_calls(folder / "main.tf")["noetl"]
        assert call["source"] == "../../modules/stack"
        env_roles = dict(_blocks(folder / "variables.tf", "variable"))["roles"]
        assert env_roles["type"] == stack_type, f"{env}: roles type differs from modules/stack"
        assert env_roles["default"] is None  # null = the stack's default: every role
    stack_calls = _module_calls(STACK / "main.tf")
    sources = {Path(c["source"]).name for c in stack_calls.values()}
    assert set(REQUIRED_MODULES) <= sources


# -- roles -----------------------------------------------------------------------------------------


def test_the_role_map_has_every_role_and_every_entry_point() -> None:
    roles = set(_roles())
    assert roles == {"execute", "ingress", "worker", "projector", "frames", "spool_drainer", "subscription_runtime"}
    built = {p.parent.name for p in (ROOT / "functions").glob("*/main.py")}
    assert built, "no role entry points found"
    assert built <= roles, f"roles with code but no infrastructure: {sorted(built - roles)}"


def _stack_locals() -> dict[str, Any]:
    return {k: v for block in _parse(STACK / "main.tf").get("locals", []) for k, v in block.items()}


def test_every_role_has_a_cloud_run_service_and_its_own_service_account() -> None:
    service = _module_calls(STACK / "main.tf")["service"]
    assert service["source"] == "../cloud_run_service"
    assert service["for_each"] == "${local.run_services}"
    assert service["role"] == "${each.value.role}"
    assert service["service_account_email"] == "${module.iam.role_emails[each.value.role]}"
    # Each service is a Cloud Run service or (roles[*].deployable = "function") a 2nd-gen function:
    # the two maps split local.services, with the same identity per role.
    function = _module_calls(STACK / "functions.tf")["function"]
    assert function["source"] == "../cloud_function" and function["for_each"] == "${local.function_services}"
    assert function["service_account_email"] == service["service_account_email"]
    split = {k: v for b in _parse(STACK / "functions.tf")["locals"] for k, v in b.items()}
    assert 'if var.roles[s.role].deployable == "run"}' in split["run_services"]
    assert 'if var.roles[s.role].deployable == "function"}' in split["function_services"]
    # local.services: a service per role, except worker (one per pool) and subscription_runtime (one
    # per runtime subscription), each named after its role.
    text = (STACK / "main.tf").read_text()
    services = text[text.index("services = merge(") : text.index("service_url =")]
    assert (
        "for r in local.roles : r => {" in services
        and 'if !contains(["worker", "subscription_runtime"], r)' in services
    )
    assert 'for p in var.pools : "worker-${p}" => {' in services and 'role         = "worker"' in services
    assert 'if contains(local.roles, "worker")' in services
    assert 'for n, s in var.runtime_subscriptions : "subscription_runtime-${n}" => {' in services
    assert 'role         = "subscription_runtime"' in services and "subscription = s.path" in services
    crs = _resources(MODULES / "cloud_run_service" / "main.tf")
    services_tf = [body for rtype, _n, body in crs if rtype == "google_cloud_run_v2_service"]
    assert len(services_tf) == 1 and services_tf[0]["template"][0]["service_account"] == "${var.service_account_email}"

    iam_call = _module_calls(STACK / "main.tf")["iam"]
    assert iam_call["roles"] == "${local.roles}"
    accounts = {
        name: body for rtype, name, body in _resources(MODULES / "iam" / "main.tf") if rtype == "google_service_account"
    }
    assert accounts["role"]["for_each"] == "${var.roles}"
    assert "each.key" in accounts["role"]["account_id"]
    # One account per role: the id is the role's name, not shared with another identity.
    other_ids = [body["account_id"] for name, body in accounts.items() if name != "role"]
    for role in _roles():
        assert all(role.replace("_", "-") not in account for account in other_ids)


def test_each_pool_pushes_to_its_own_worker_service() -> None:
    pubsub = _module_calls(STACK / "main.tf")["pubsub"]
    pools = pubsub["pools"]
    assert "for p in var.pools : p =>" in pools
    assert 'local.service_url["worker-${p}"]' in pools and "local.routes.worker_push.path" in pools
    # Each worker service is told its pool and its own URL as the push audience.
    text = (STACK / "main.tf").read_text()
    env = text[text.index("service_env = {") : text.index("maintenance_jobs = {")]
    assert re.search(r"NOETL_WORKER_POOL\s*=\s*s\.pool", env)
    assert re.search(r"NOETL_WORKER_PUSH_AUDIENCE\s*=\s*local\.service_url\[k\]", env)


def test_the_subscription_runtime_keeps_an_instance_with_cpu_and_is_probed_on_healthz() -> None:
    roles = _roles()
    runtime = roles["subscription_runtime"]
    assert runtime["min_instances"] >= 1 and runtime["cpu_idle"] is False
    validations = dict(_blocks(STACK / "variables.tf", "variable"))["roles"]["validation"]
    assert any("subscription_runtime" in v["condition"] and "min_instances >= 1" in v["condition"] for v in validations)
    service = _module_calls(STACK / "main.tf")["service"]
    assert service["probes"]["path"] == "${local.routes.health.path}"
    assert service["probes"]["liveness"] == '${each.value.role == "subscription_runtime"}'
    assert _stack_locals()["routes"]["health"]["path"] == "/healthz"
    crs = next(
        b for t, _n, b in _resources(MODULES / "cloud_run_service" / "main.tf") if t == "google_cloud_run_v2_service"
    )
    container = crs["template"][0]["containers"][0]
    assert container["startup_probe"][0]["http_get"][0]["path"] == "${var.probes.path}"
    liveness = next(d["liveness_probe"] for d in container["dynamic"] if "liveness_probe" in d)
    assert liveness["for_each"] == "${var.probes.liveness ? [var.probes.path] : []}"
    assert container["resources"][0]["cpu_idle"] == "${var.resources.cpu_idle}"
    assert service["resources"]["cpu_idle"] == "${var.roles[each.value.role].cpu_idle}"
    assert service["scaling"]["min_instances"] == "${var.roles[each.value.role].min_instances}"


def test_the_roles_that_publish_after_answering_keep_their_cpu_between_requests() -> None:
    """execute and frames hand committed outbox rows to a relay thread and answer (docs/architecture.md):
    Cloud Run must not throttle their CPU once the response is sent."""
    roles = _roles()
    assert roles["execute"]["cpu_idle"] is False and roles["frames"]["cpu_idle"] is False
    validations = dict(_blocks(STACK / "variables.tf", "variable"))["roles"]["validation"]
    assert any(
        '["execute", "frames"]' in v["condition"] and "NOETL_OUTBOX_PUBLISH" in v["condition"] for v in validations
    )
    for env in ("dev", "prod"):
        example = hcl2.loads((INFRA / "environments" / env / "terraform.tfvars.example").read_text())
        assert example["roles"]["execute"]["cpu_idle"] is False and example["roles"]["frames"]["cpu_idle"] is False


def test_firestore_access_is_conditioned_on_the_one_database() -> None:
    grants = [b for t, _n, b in _resources(MODULES / "iam" / "main.tf") if b.get("role") == "roles/datastore.user"]
    assert len(grants) == 1
    assert grants[0]["condition"][0]["expression"] == "${local.firestore_condition.expression}"
    iam_locals = {k: v for b in _parse(MODULES / "iam" / "main.tf")["locals"] for k, v in b.items()}
    expression = iam_locals["firestore_condition"]["expression"]
    assert "databases/${var.resources.firestore_database}" in expression and expression.startswith("resource.name ==")
    assert _module_calls(STACK / "main.tf")["iam"]["resources"]["firestore_database"] == "${module.firestore.name}"


def test_only_ingress_is_public() -> None:
    public = [
        (path, rtype, name, body)
        for path, rtype, name, body in _all_resources()
        if body.get("member") == "allUsers" or "allUsers" in body.get("members", [])
    ]
    # One public grant per deployable of a role: the Cloud Run service's, and the function's (a
    # 2nd-gen function is invoked through the Cloud Run service it runs as).
    assert sorted(path.parent.name for path, *_rest in public) == ["cloud_function", "cloud_run_service"], public
    for _path, rtype, _name, body in public:
        assert rtype == "google_cloud_run_v2_service_iam_member"
        assert body["count"] == "${var.allow_unauthenticated ? 1 : 0}"
    assert "allAuthenticatedUsers" not in "".join(p.read_text() for p in TF_FILES)
    # The one caller of each module sets allow_unauthenticated for ingress and nothing else.
    callers = [
        call
        for path in TF_FILES
        for call in _module_calls(path).values()
        if call["source"] in ("../cloud_run_service", "../cloud_function")
    ]
    assert [c["allow_unauthenticated"] for c in callers] == ['${each.value.role == "ingress"}'] * 2


def test_push_identity_invokes_only_worker_and_projector() -> None:
    iam_main = _parse(MODULES / "iam" / "main.tf")
    service_callers = next(b["service_callers"] for b in iam_main["locals"] if "service_callers" in b)
    assert set(service_callers) == set(_roles())
    holders = {role for role, caller_roles in service_callers.items() if "pubsub_push" in caller_roles}
    assert holders == {"worker", "projector"}
    assert service_callers["ingress"] == []
    invokers = (MODULES / "iam" / "outputs.tf").read_text()
    assert "local.callers[r]" in invokers
    # The push identity's tokens open only the push endpoints: no API allowlist names it.
    api_callers = next(b["api_callers"] for b in iam_main["locals"] if "api_callers" in b)
    assert 'if r != "pubsub_push"' in str(api_callers)


def test_only_control_plane_roles_reach_cloud_sql() -> None:
    iam_main = _parse(MODULES / "iam" / "main.tf")
    merged = {k: v for b in iam_main["locals"] for k, v in b.items()}
    assert re.search(r'setintersection\(var\.roles, \["execute", "frames", "projector"\]\)', merged["control_plane"])
    sql_grants = {
        body["role"]: body
        for rtype, _n, body in _resources(MODULES / "iam" / "main.tf")
        if "cloudsql" in body.get("role", "")
    }
    assert set(sql_grants) == {"roles/cloudsql.client", "roles/cloudsql.instanceUser"}
    for body in sql_grants.values():
        assert body["for_each"] == "${local.cloudsql_members}"
        assert body["condition"], "Cloud SQL grants are scoped to the one instance"
    assert "local.control_plane" in merged["cloudsql_members"]
    # No other file grants a Cloud SQL role.
    others = [
        (path, name)
        for path, _t, name, body in _all_resources()
        if "cloudsql" in str(body.get("role", "")) and path != MODULES / "iam" / "main.tf"
    ]
    assert others == []


def test_no_basic_roles_anywhere() -> None:
    for path, rtype, name, body in _all_resources():
        role = str(body.get("role", ""))
        assert role not in ("roles/owner", "roles/editor", "roles/viewer"), f"{path}: {rtype}.{name}"


# -- messaging and storage --------------------------------------------------------------------------


def test_every_push_subscription_has_an_oidc_token_and_a_dead_letter_policy() -> None:
    subscriptions = [
        (path, name, body) for path, rtype, name, body in _all_resources() if rtype == "google_pubsub_subscription"
    ]
    pushes = [(path, name, body) for path, name, body in subscriptions if body.get("push_config")]
    assert pushes, "no push subscription found"
    for path, name, body in pushes:
        push = body["push_config"][0]
        oidc = push.get("oidc_token")
        assert oidc and oidc[0]["service_account_email"], f"{path}: {name} has no oidc_token"
        assert oidc[0]["audience"]
        assert body.get("dead_letter_policy"), f"{path}: {name} has no dead_letter_policy"
        assert body["dead_letter_policy"][0]["dead_letter_topic"]
        assert body.get("retry_policy"), f"{path}: {name} has no retry_policy"


def test_events_are_ordered_and_dead_letters_are_granted_to_the_service_agent() -> None:
    main = _parse(MODULES / "pubsub" / "main.tf")
    push_local = next(b["push"] for b in main["locals"] if "push" in b)
    assert "ordered               = true" in push_local or "ordered = true" in re.sub(r"\s+", " ", push_local)
    res = {(t, n): b for t, n, b in _resources(MODULES / "pubsub" / "main.tf")}
    assert res[("google_pubsub_subscription", "push")]["enable_message_ordering"] == "${each.value.ordered}"
    assert res[("google_pubsub_topic_iam_member", "dead_letter_publisher")]["role"] == "roles/pubsub.publisher"
    assert res[("google_pubsub_subscription_iam_member", "dead_letter_subscriber")]["role"] == "roles/pubsub.subscriber"
    assert res[("google_pubsub_subscription", "dead_letter")]["topic"]


def test_every_bucket_has_uniform_access_and_public_access_prevention() -> None:
    buckets = [(path, name, body) for path, rtype, name, body in _all_resources() if rtype == "google_storage_bucket"]
    assert buckets
    for path, name, body in buckets:
        assert body.get("uniform_bucket_level_access") is True, f"{path}: {name}"
        assert body.get("public_access_prevention") == "enforced", f"{path}: {name}"
        ages = [str(rule["condition"][0].get("days_since_custom_time")) for rule in body.get("lifecycle_rule", [])]
        assert any("dead_letter_age_days" in a for a in ages), f"{path}: {name} has no dead-letter lifecycle"


def test_cloudsql_is_postgres15_with_iam_auth_backups_pitr_and_deletion_protection() -> None:
    res = {(t, n): b for t, n, b in _resources(MODULES / "cloudsql" / "main.tf")}
    instance = res[("google_sql_database_instance", "this")]
    assert instance["database_version"] == "POSTGRES_15"
    assert instance["deletion_protection"] == "${var.deletion_protection}"
    settings = instance["settings"][0]
    flags = {f["name"]: f["value"] for f in settings["database_flags"]}
    assert flags["cloudsql.iam_authentication"] == "on"
    backup = settings["backup_configuration"][0]
    assert backup["point_in_time_recovery_enabled"] and backup["enabled"]
    assert settings["ip_configuration"][0]["ssl_mode"] == "ENCRYPTED_ONLY"
    assert res[("google_sql_user", "iam")]["type"] == "CLOUD_IAM_SERVICE_ACCOUNT"


def test_firestore_is_native_mode() -> None:
    res = {(t, n): b for t, n, b in _resources(MODULES / "firestore" / "main.tf")}
    assert res[("google_firestore_database", "this")]["type"] == "FIRESTORE_NATIVE"


def test_secrets_reach_services_only_through_secret_manager_references() -> None:
    service = next(
        b for t, _n, b in _resources(MODULES / "cloud_run_service" / "main.tf") if t == "google_cloud_run_v2_service"
    )
    envs = service["template"][0]["containers"][0]["dynamic"]
    secret_env = next(d["env"] for d in envs if "value_source" in str(d))
    assert "secret_key_ref" in str(secret_env)
    text = "\n".join(p.read_text() for p in TF_FILES)
    # The one secret version Terraform writes (the Cloud SQL admin password) goes through write-only
    # arguments from an ephemeral value: it is in neither the plan nor the state.
    versions = [
        (path, body) for path, rtype, _n, body in _all_resources() if rtype == "google_secret_manager_secret_version"
    ]
    assert [b["secret_data_wo"] for _p, b in versions] == ["${ephemeral.random_password.db_admin.result}"]
    assert "secret_data" not in versions[0][1] and "secret_data =" not in text
    users = [body for _p, rtype, _n, body in _all_resources() if rtype == "google_sql_user"]
    assert [u.get("password_wo") for u in users if "password_wo" in u] == ["${var.admin_password}"]
    assert not any("password" in u for u in users)
    admin_password = dict(_blocks(MODULES / "cloudsql" / "variables.tf", "variable"))["admin_password"]
    assert admin_password["ephemeral"] is True and admin_password["sensitive"] is True
    assert not re.search(r"NOETL_(INTERNAL_API_TOKEN|DB_PASSWORD)\s*=", text)


def test_every_noetl_variable_set_by_terraform_is_a_setting() -> None:
    known = {Settings.env_name(f) for f in Settings.model_fields}
    text = "\n".join(p.read_text() for p in TF_FILES)
    names = set(re.findall(r"\b(NOETL_[A-Z_]+)\s*=", text)) | set(re.findall(r'"(NOETL_[A-Z_]+)"', text))
    assert {"NOETL_CLOUDSQL_INSTANCE", "NOETL_DB_IAM_AUTH", "NOETL_INTERNAL_API_CALLERS", "NOETL_API_URL"} <= names
    assert names <= known, f"not settings (the roles would refuse to start): {sorted(names - known)}"


# -- nothing environment-specific is hard-coded ------------------------------------------------------


def test_no_literal_project_id_or_region_outside_examples() -> None:
    for path in TF_FILES:
        text = path.read_text()
        assert not REGION.search(text), f"{path.relative_to(INFRA)} hard-codes a region: {REGION.search(text)}"
        assert "projects/my-" not in text
    for path, rtype, name, body in _all_resources():
        for key in ("project", "region", "location"):
            if key in body:
                assert str(body[key]).startswith("${"), f"{path}: {rtype}.{name}.{key} = {body[key]!r} is a literal"
    for path in TF_FILES:
        for name, body in _blocks(path, "variable"):
            if name in ("project_id", "region", "firestore_location"):
                assert "default" not in body, f"{path.relative_to(INFRA)}: {name} must be given, not defaulted"


def test_tfvars_examples_give_every_required_value() -> None:
    for env in ("dev", "prod"):
        folder = INFRA / "environments" / env
        required = {name for name, body in _blocks(folder / "variables.tf", "variable") if "default" not in body}
        example = hcl2.loads((folder / "terraform.tfvars.example").read_text())
        assert required <= set(example), f"{env}: example lacks {sorted(required - set(example))}"
        # The examples deploy every role: the runtime needs a subscription to hold, workers a pool.
        assert set(example["roles"]) == set(_roles()), f"{env}: example roles {sorted(example['roles'])}"
        assert example["runtime_subscriptions"] and example["pools"]
        runtime = example["roles"]["subscription_runtime"]
        assert runtime["min_instances"] >= 1 and runtime["cpu_idle"] is False
        # Instances share the subscription (a SIGTERM drains one instance only): the examples scale out.
        assert runtime["max_instances"] > 1


def test_the_subscription_runtime_scales_past_one_instance_by_default() -> None:
    runtime = _roles()["subscription_runtime"]
    assert runtime["max_instances"] > 1
    validations = dict(_blocks(STACK / "variables.tf", "variable"))["roles"]["validation"]
    assert not any("max_instances" in v["condition"] and "subscription_runtime" in v["condition"] for v in validations)


# -- a first plan over an empty project ----------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_for_each_and_count_is_known_at_plan(env: str) -> None:
    """No for_each/count of any module instance reaches an attribute of a created resource (an email,
    an id), which Terraform knows only after apply: "Invalid for_each argument" on a fresh project."""
    root = INFRA / "environments" / env
    assert len(terraform_support.instances(root)) >= 10  # the stack and every module below it were walked
    assert terraform_support.plan_unknown_uses(root) == []


def _write_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path / "env"


_ACCOUNTS_MODULE = """
resource "google_service_account" "role" {
  for_each   = var.roles
  account_id = each.key
}
variable "roles" {
  type = set(string)
}
variable "project_id" {
  type = string
}
output "created_emails" {
  value = { for r, sa in google_service_account.role : r => sa.email }
}
output "built_emails" {
  value      = { for r in var.roles : r => "${r}@${var.project_id}.iam.gserviceaccount.com" }
  depends_on = [google_service_account.role]
}
"""


def test_the_plan_known_check_finds_a_for_each_over_emails_read_back_from_created_accounts(tmp_path: Path) -> None:
    root = _write_tree(
        tmp_path,
        {
            "accounts/main.tf": _ACCOUNTS_MODULE,
            "users/main.tf": """
variable "emails" {
  type = set(string)
}
resource "google_sql_user" "iam" {
  for_each = var.emails
  name     = each.value
}
""",
            "env/main.tf": """
module "accounts" {
  source     = "../accounts"
  roles      = ["execute", "frames"]
  project_id = "p"
}
module "users" {
  source = "../users"
  emails = toset(values(module.accounts.created_emails))
}
""",
        },
    )
    problems = terraform_support.plan_unknown_uses(root)
    assert len(problems) == 1
    assert "google_sql_user.iam (for_each)" in problems[0] and "google_service_account.role" in problems[0]
    # The same users keyed by emails built from the account ids (what modules/iam does) pass.
    text = (root / "main.tf").read_text().replace("created_emails", "built_emails")
    (root / "main.tf").write_text(text)
    terraform_support.parse.cache_clear()
    terraform_support.folder.cache_clear()
    assert terraform_support.plan_unknown_uses(root) == []


def test_the_plan_known_check_finds_object_fields_locals_and_deferred_data_sources(tmp_path: Path) -> None:
    root = _write_tree(
        tmp_path,
        {
            "grants/main.tf": """
variable "resources" {
  type = object({ topics = map(string), bucket = string })
}
data "google_project" "this" {
  project_id = "p"
}
locals {
  agent_count = data.google_project.this.number > 0 ? 1 : 0
}
resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = var.resources.topics
  topic    = each.value
}
resource "google_storage_bucket_iam_member" "agent" {
  count  = local.agent_count
  bucket = var.resources.bucket
}
""",
            "env/main.tf": """
resource "google_pubsub_topic" "t" {
  name = "t"
}
resource "google_storage_bucket" "b" {
  name = "b"
}
module "grants" {
  source     = "../grants"
  resources  = {
    topics = { t = google_pubsub_topic.t.name }
    bucket = google_storage_bucket.b.name
  }
  depends_on = [google_storage_bucket.b]
}
""",
        },
    )
    problems = terraform_support.plan_unknown_uses(root)
    # The topic map reaches a created topic; the bucket field (only a value) is not reported; the data
    # source is read at apply because the module waits on a resource.
    assert any("publisher (for_each)" in p and "google_pubsub_topic.t" in p for p in problems), problems
    assert any("agent (count)" in p and "data.google_project.this" in p for p in problems), problems
    assert not any("google_storage_bucket.b" in p for p in problems), problems
    assert len(problems) == 2


# -- Firestore: what kv/firestore.py relies on -----------------------------------------------------


def test_the_kv_collection_has_a_ttl_on_expires_at_and_no_index_on_fields_never_queried() -> None:
    res = {(t, n): b for t, n, b in _resources(MODULES / "firestore" / "main.tf")}
    ttl = res[("google_firestore_field", "ttl")]
    assert ttl["field"] == "expires_at" and ttl["ttl_config"] == [{}]
    assert ttl["collection"] == "${var.kv_collection}" and ttl["database"] == "${google_firestore_database.this.name}"
    exempt = res[("google_firestore_field", "not_indexed")]
    assert exempt["for_each"] == '${toset(["value_json", "key", "updated_at"])}'
    assert exempt["collection"] == "${var.kv_collection}"
    # index_config {} with no indexes is the exemption; the TTL field is exempted as well.
    assert exempt["index_config"] == [{}] and ttl["index_config"] == [{}]
    # The adapter writes exactly these fields, and its documents are only ever read by id.
    adapter = (ROOT / "shared" / "noetl_cloud" / "kv" / "firestore.py").read_text()
    for name in ("expires_at", "value_json", "key", "updated_at"):
        assert f'"{name}":' in adapter, name
    assert ".where(" not in adapter and ".order_by(" not in adapter
    # One collection name, from the stack, in the module and in every Firestore user's settings.
    stack = terraform_support.folder(STACK.resolve())
    assert stack.modules["firestore"]["kv_collection"] == "${local.kv_collection}"
    assert stack.locals["spool_env"]["NOETL_KV_COLLECTION"] == "${local.kv_collection}"
    for role in ("ingress", "spool_drainer", "subscription_runtime"):
        assert "local.spool_env" in stack.locals["role_env"][role]
    variables = dict(_blocks(MODULES / "firestore" / "variables.tf", "variable"))
    assert variables["kv_collection"]["default"] == Settings.model_fields["kv_collection"].default


def test_the_deployer_reads_only_the_build_source_bucket() -> None:
    res = {(t, n): b for t, n, b in _resources(MODULES / "iam" / "main.tf")}
    reader = res[("google_storage_bucket_iam_member", "deployer_source_reader")]
    assert reader["bucket"] == "${var.resources.build_source_bucket}"
    assert reader["role"] == "roles/storage.objectViewer"
    assert "deployer" in reader["member"]
    # Every storage grant names one bucket: none is project-wide.
    for path, rtype, name, body in _all_resources():
        if "roles/storage." in str(body):
            assert rtype == "google_storage_bucket_iam_member", f"{path}: {rtype}.{name}"
    stack = terraform_support.folder(STACK.resolve())
    assert stack.modules["iam"]["resources"]["build_source_bucket"] == "${module.build_source_bucket.name}"
    assert stack.modules["build_source_bucket"]["source"] == "../spool_bucket"
    # The documented submit stages the source in that bucket (not the project's default _cloudbuild one).
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "--gcs-source-staging-dir" in docs and "build_source_staging_dir" in docs


def test_the_deployer_changes_only_the_services_and_the_job_of_the_stack() -> None:
    """Project-wide the deployer reads Cloud Run and writes logs; run.developer is granted per service
    (modules/cloud_run_service) and on the migration job, never on the project."""
    res = {(t, n): b for t, n, b in _resources(MODULES / "iam" / "main.tf")}
    assert res[("google_project_iam_member", "deployer")]["for_each"] == (
        '${toset(["roles/run.viewer", "roles/logging.logWriter"])}'
    )
    for path, rtype, name, body in _all_resources():
        if rtype == "google_project_iam_member":
            text = str(body.get("role")) + str(body.get("for_each"))
            assert "run.developer" not in text and "run.admin" not in text, f"{path}: {name}"
    crs = {(t, n): b for t, n, b in _resources(MODULES / "cloud_run_service" / "main.tf")}
    developer = crs[("google_cloud_run_v2_service_iam_member", "developer")]
    assert developer["role"] == "roles/run.developer" and developer["for_each"] == "${var.developers}"
    assert developer["name"] == "${google_cloud_run_v2_service.this.name}"
    service = _module_calls(STACK / "main.tf")["service"]
    assert service["developers"] == ["serviceAccount:${module.iam.deployer_email}"]
    job = {(t, n): b for t, n, b in _resources(STACK / "main.tf")}[("google_cloud_run_v2_job_iam_member", "deployer")]
    assert job["name"] == "${google_cloud_run_v2_job.migrate.name}" and job["role"] == "roles/run.developer"


def test_the_migration_job_grants_schema_access_before_it_upgrades() -> None:
    """No person runs SQL on a new instance: the job runs noetl_cloud.dbaccess (as the built-in admin
    user, its password from Secret Manager, then as the schema owner) and then the upgrade."""
    stack = {(t, n): b for t, n, b in _resources(STACK / "main.tf")}
    container = stack[("google_cloud_run_v2_job", "migrate")]["template"][0]["template"][0]["containers"][0]
    assert container["args"] == ["python -m noetl_cloud.dbaccess && exec noetl-cloud db upgrade"]
    env = next(d["env"] for d in container["dynamic"] if "env" in d)["for_each"]
    for name in ("NOETL_DB_ADMIN_USER", "NOETL_DB_RUNTIME_USERS", "NOETL_DB_USER"):
        assert name in env
    assert "local.control_plane" in env
    secret = container["env"][0]
    assert secret["name"] == "NOETL_DB_ADMIN_PASSWORD"
    ref = secret["value_source"][0]["secret_key_ref"][0]
    assert ref["secret"] == "${google_secret_manager_secret.db_admin_password.secret_id}"
    known = {Settings.env_name(f) for f in Settings.model_fields}
    assert {"NOETL_DB_ADMIN_USER", "NOETL_DB_ADMIN_PASSWORD", "NOETL_DB_RUNTIME_USERS"} <= known
    # Only the migration job's account reads that secret.
    readers = [
        body
        for _p, rtype, _n, body in _all_resources()
        if rtype == "google_secret_manager_secret_iam_member" and "db_admin_secret" in str(body.get("secret_id"))
    ]
    assert len(readers) == 1 and readers[0]["member"] == "serviceAccount:${local.emails.migrate}"
    assert (ROOT / "shared" / "noetl_cloud" / "dbaccess.py").is_file()


def test_only_the_pullers_may_pull_users_subscriptions() -> None:
    """The runtime pulls the continuous subscriptions' sources; the execute role (its subscription tick)
    the scheduled ones' (var.scheduled_sources); no one else gets pubsub.subscriber on a user's subscription."""
    iam_main = _parse(MODULES / "iam" / "main.tf")
    merged = {k: v for b in iam_main["locals"] for k, v in b.items()}
    assert merged["source_pullers"] == '${setintersection(var.roles, ["subscription_runtime"])}'
    assert merged["tick_pullers"] == '${setintersection(var.roles, ["execute"])}'
    grants = {
        name: body
        for rtype, name, body in _resources(MODULES / "iam" / "main.tf")
        if rtype == "google_pubsub_subscription_iam_member"
    }
    assert set(grants) == {"source_subscriber", "scheduled_source_subscriber"}
    assert "local.tick_pullers, var.resources.scheduled_sources" in grants["scheduled_source_subscriber"]["for_each"]
    assert "local.source_pullers, var.resources.source_subscriptions" in grants["source_subscriber"]["for_each"]
    assert _module_calls(STACK / "main.tf")["iam"]["resources"]["scheduled_sources"] == "${var.scheduled_sources}"
