"""Operations in Terraform (issue #22 item 11): the alert policies of infra/modules/monitoring and the
Cloud Build trigger of infra/modules/build_trigger, wired into the stack and both environments.

Parsed with python-hcl2 (the provider-schema check, tests/unit/test_provider_schema.py, proves every
argument exists in the google provider); here: each policy watches what it says, with the names the
stack and the code really use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from noetl_cloud.spool.drain import DEAD_LETTERED_LOG
from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "infra" / "modules"
STACK = MODULES / "stack"


def _resources(path: Path, rtype: str) -> dict[str, dict[str, Any]]:
    return {
        name: body
        for block in terraform_support.parse(path).get("resource", [])
        for kind, named in block.items()
        if kind == rtype
        for name, body in named.items()
    }


def _modules(path: Path) -> dict[str, dict[str, Any]]:
    return {name: body for block in terraform_support.parse(path).get("module", []) for name, body in block.items()}


def _variables(path: Path) -> dict[str, dict[str, Any]]:
    return {name: body for block in terraform_support.parse(path).get("variable", []) for name, body in block.items()}


def _conditions(policy: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(condition kind, body) of each condition, filters with their quotes unescaped."""
    found = []
    for condition in policy["conditions"]:
        for kind, bodies in condition.items():
            if kind.startswith("condition_"):
                body = dict(bodies[0])
                for key in ("filter", "denominator_filter"):
                    if key in body:
                        body[key] = body[key].replace('\\"', '"')
                found.append((kind, body))
    return found


POLICIES = _resources(MODULES / "monitoring" / "main.tf", "google_monitoring_alert_policy")


def test_the_five_alerts_the_issue_names_exist_and_each_notifies_the_channels() -> None:
    assert set(POLICIES) == {
        "dead_letter_backlog",
        "http_5xx_rate",
        "spool_dead_letters",
        "cloudsql_connections",
        "runtime_liveness",
    }
    for name, policy in POLICIES.items():
        assert policy["notification_channels"] == "${var.notification_channels}", name
        assert policy["display_name"].startswith("${var.name_prefix}: "), name
        assert policy["documentation"][0]["content"].strip(), name
        assert _conditions(policy), name


def test_dead_letters_watch_the_dead_letter_subscriptions_the_pubsub_module_creates() -> None:
    ((kind, body),) = _conditions(POLICIES["dead_letter_backlog"])
    assert kind == "condition_threshold" and body["comparison"] == "COMPARISON_GT"
    assert 'metric.type = "pubsub.googleapis.com/subscription/num_undelivered_messages"' in body["filter"]
    assert "resource.labels.subscription_id = one_of(${local.dead_letters})" in body["filter"]
    call = _modules(STACK / "operations.tf")["monitoring"]
    assert call["dead_letter_subscriptions"] == "${sort(values(module.pubsub.dead_letter_subscriptions))}"
    outputs = {n for b in terraform_support.parse(MODULES / "pubsub" / "outputs.tf")["output"] for n in b}
    assert "dead_letter_subscriptions" in outputs


def test_the_5xx_rate_is_a_ratio_of_each_services_requests() -> None:
    ((kind, body),) = _conditions(POLICIES["http_5xx_rate"])
    assert kind == "condition_threshold"
    assert body["filter"] == '${local.requests} AND metric.labels.response_code_class = "5xx"'
    assert body["denominator_filter"] == "${local.requests}"
    grouped = ["resource.label.service_name"]
    assert (
        body["aggregations"][0]["group_by_fields"] == body["denominator_aggregations"][0]["group_by_fields"] == grouped
    )
    assert body["threshold_value"] == "${var.thresholds.error_ratio}"


def test_spool_dead_letters_match_the_line_the_drainer_logs() -> None:
    ((kind, body),) = _conditions(POLICIES["spool_dead_letters"])
    assert kind == "condition_matched_log"
    assert f'jsonPayload.message = "{DEAD_LETTERED_LOG}"' in body["filter"]
    assert set(body["label_extractors"]) == {"subscription", "reason"}
    # A log-match condition needs a notification rate limit (the API refuses it without one).
    assert POLICIES["spool_dead_letters"]["alert_strategy"][0]["notification_rate_limit"][0]["period"]


def test_cloud_sql_connections_fire_below_the_instances_max_connections() -> None:
    ((kind, body),) = _conditions(POLICIES["cloudsql_connections"])
    assert kind == "condition_threshold" and body["threshold_value"] == "${local.max_backends}"
    assert 'metric.type = "cloudsql.googleapis.com/database/postgresql/num_backends"' in body["filter"]
    locals_ = {
        k: v for b in terraform_support.parse(MODULES / "monitoring" / "main.tf")["locals"] for k, v in b.items()
    }
    assert locals_["max_backends"] == "${floor(var.cloudsql.max_connections * var.thresholds.connection_ratio)}"
    call = _modules(STACK / "operations.tf")["monitoring"]
    assert call["cloudsql"]["max_connections"] == "${var.cloudsql.max_connections}"  # the flag the instance gets
    assert call["cloudsql"]["database_id"] == "${var.project_id}:${module.cloudsql.instance_name}"


def test_runtime_liveness_watches_every_runtime_service_for_absence_and_zero_instances() -> None:
    policy = POLICIES["runtime_liveness"]
    assert policy["count"] == "${length(var.runtime_services) > 0 ? 1 : 0}" and policy["combiner"] == "OR"
    kinds = dict(_conditions(policy))
    assert set(kinds) == {"condition_absent", "condition_threshold"}
    for body in kinds.values():
        assert 'metric.type = "run.googleapis.com/container/instance_count"' in body["filter"]
        assert "one_of(${local.runtimes})" in body["filter"]
    assert kinds["condition_threshold"]["comparison"] == "COMPARISON_LT"
    call = _modules(STACK / "operations.tf")["monitoring"]
    assert 'if s.role == "subscription_runtime"' in call["runtime_services"]


def test_the_trigger_runs_cloudbuild_yaml_as_the_deployer_with_the_stacks_substitutions() -> None:
    (trigger,) = _resources(MODULES / "build_trigger" / "main.tf", "google_cloudbuild_trigger").values()
    assert trigger["filename"] == "cloudbuild.yaml" and (ROOT / "cloudbuild.yaml").is_file()
    assert trigger["service_account"] == "projects/${var.project_id}/serviceAccounts/${var.service_account_email}"
    call = _modules(STACK / "operations.tf")["build_trigger"]
    assert call["count"] == "${var.build_trigger == null ? 0 : 1}"
    assert call["service_account_email"] == "${module.iam.deployer_email}"
    # Every substitution cloudbuild.yaml leaves empty or stack-specific is set, as gcloud builds submit sets them.
    build = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    assert set(call["substitutions"]) == {"_REGION", "_REPOSITORY", "_NAME_PREFIX"} <= set(build["substitutions"])
    output = {k: v for b in terraform_support.parse(STACK / "outputs.tf")["output"] for k, v in b.items()}
    for key in call["substitutions"]:
        assert f"{key}=" in output["cloudbuild_substitutions"]["value"]
    # CLOUD_LOGGING_ONLY: a build run as a user-specified service account has no default logs bucket.
    assert build["options"]["logging"] == "CLOUD_LOGGING_ONLY"


def test_both_environments_wire_notification_channels_and_the_trigger() -> None:
    stack_vars = _variables(STACK / "variables.tf")
    for env in ("dev", "prod"):
        folder = ROOT / "infra" / "environments" / env
        call = _modules(folder / "main.tf")["noetl"]
        assert call["alerts"] == {"notification_channels": "${var.notification_channels}"}
        assert call["build_trigger"] == "${var.build_trigger}"
        variables = _variables(folder / "variables.tf")
        assert variables["notification_channels"]["default"] == []
        assert variables["build_trigger"]["default"] is None
        assert variables["build_trigger"]["type"] == stack_vars["build_trigger"]["type"]
