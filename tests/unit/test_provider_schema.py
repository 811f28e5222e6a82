"""Every resource, data source, argument and block under infra/ exists in the google / google-beta
provider, and every required argument and block is set: checked against the providers' schema as the
CDKTF prebuilt provider packages carry it (tests/unit/provider_schema.py), not against HCL syntax."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit import provider_schema, terraform_support

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
TF_FILES = sorted(INFRA.rglob("*.tf"))
PACKAGES = {"google": "cdktf-cdktf-provider-google", "google-beta": "cdktf-cdktf-provider-google-beta"}

Declared = list[tuple[Path, str, str, str, dict[str, Any]]]


def _wanted(declared: Declared) -> dict[str, set[tuple[str, str]]]:
    wanted: dict[str, set[tuple[str, str]]] = {name: set() for name in PACKAGES}
    for _path, kind, tf_type, _name, body in declared:
        wanted[provider_schema.provider_of(body)].add((kind, tf_type))
    return wanted


@pytest.fixture(scope="module")
def declared() -> Declared:
    return provider_schema.declared(TF_FILES)


@pytest.fixture(scope="module")
def providers(declared: Declared) -> dict[str, provider_schema.Provider]:
    return {name: provider_schema.load(PACKAGES[name], wanted) for name, wanted in _wanted(declared).items()}


def test_the_schema_is_of_a_provider_version_the_configuration_accepts(
    providers: dict[str, provider_schema.Provider],
) -> None:
    for name, provider in providers.items():
        major, minor, _patch = (int(p) for p in provider.version.split("."))
        for path in INFRA.rglob("versions.tf"):
            pins = terraform_support.parse(path)["terraform"][0].get("required_providers", [{}])[0]
            if name in pins:
                # ">= 6.0, < 7.0" everywhere (tests/unit/test_infra.py pins the form)
                pin = re.fullmatch(r">= (\d+)\.(\d+), < (\d+)\.0", pins[name]["version"])
                assert pin, (path, pins[name]["version"])
                low = (int(pin.group(1)), int(pin.group(2)))
                assert low <= (major, minor) and major < int(pin.group(3)), (path, provider.version)


def test_every_resource_and_data_source_exists_in_its_provider(
    declared: Declared, providers: dict[str, provider_schema.Provider]
) -> None:
    assert len(declared) >= 25
    for path, kind, tf_type, name, body in declared:
        provider = providers[provider_schema.provider_of(body)]
        known = provider.resources if kind == "resource" else provider.data_sources
        assert tf_type in known, (
            f"{path.relative_to(ROOT)}: {kind} {tf_type}.{name} is not in {provider_schema.provider_of(body)}"
        )


def test_every_argument_and_block_exists_and_every_required_one_is_set(
    declared: Declared, providers: dict[str, provider_schema.Provider]
) -> None:
    problems = []
    for path, kind, tf_type, name, body in declared:
        provider = providers[provider_schema.provider_of(body)]
        schema = (provider.resources if kind == "resource" else provider.data_sources)[tf_type]
        problems += provider_schema.check(body, schema, f"{path.relative_to(ROOT)}: {tf_type}.{name}")
    assert problems == []


def test_the_check_reports_unknown_misplaced_and_missing_arguments_and_blocks(tmp_path: Path) -> None:
    tf = tmp_path / "main.tf"
    tf.write_text(
        """
resource "google_sql_user" "typo" {
  for_each = var.users
  instance = "i"
  nme      = each.key
  password_policy = {
    allowed_failed_attempts = 3
  }
  timeouts {
    create  = "5m"
    forever = true
  }
}

resource "google_cloud_run_v2_service" "s" {
  name     = "s"
  location = "l"
  template {
    containers {
      image = "i"
      dynamic "env" {
        for_each = {}
        content {
          name  = env.key
          value = env.value
          secret = "x"
        }
      }
      dynamic "sidecar" {
        for_each = []
        content {}
      }
    }
    scaling = "wrong"
  }
}

resource "google_pubsub_topic" "t" {
  provider = google-beta
  name     = "t"
}

resource "google_scheduler_job" "unknown_type" {
  name = "j"
}
"""
    )
    declared = provider_schema.declared([tf])
    wanted = _wanted(declared)
    providers = {name: provider_schema.load(PACKAGES[name], w) for name, w in wanted.items()}
    assert "google_scheduler_job" not in providers["google"].resources  # the type does not exist
    assert "google_pubsub_topic" in providers["google-beta"].resources  # found in google-beta's package
    problems = []
    for _path, _kind, tf_type, name, body in declared:
        schema = providers[provider_schema.provider_of(body)].resources.get(tf_type)
        if schema is not None:
            problems += provider_schema.check(body, schema, f"{tf_type}.{name}")
    assert sorted(problems) == sorted(
        [
            "google_sql_user.typo: argument 'nme' is unknown",
            "google_sql_user.typo: argument 'password_policy' is a block, not an argument",
            "google_sql_user.typo.timeouts: argument 'forever' is unknown",
            "google_sql_user.typo: required argument 'name' is not set",
            "google_cloud_run_v2_service.s.template.containers.env: argument 'secret' is unknown",
            "google_cloud_run_v2_service.s.template.containers: dynamic block 'sidecar' is not a block here",
            "google_cloud_run_v2_service.s.template: argument 'scaling' is a block, not an argument",
        ]
    )


def test_every_attribute_an_expression_reads_exists(
    declared: Declared, providers: dict[str, provider_schema.Provider]
) -> None:
    """``google_service_account.x.email``, ``data.google_project.this.number``...: a misspelt or
    missing attribute is an error only a plan with the provider would show."""
    provider_by_type = {(kind, t, n): provider_schema.provider_of(b) for _p, kind, t, n, b in declared}
    references = provider_schema.attribute_references(TF_FILES)
    assert len(references) >= 20
    unknown = []
    for path, kind, tf_type, name, attribute in references:
        provider = providers[provider_by_type[(kind, tf_type, name)]]
        schema = (provider.resources if kind == "resource" else provider.data_sources)[tf_type]
        if attribute not in schema.attributes:
            unknown.append(f"{path.relative_to(ROOT)}: {tf_type}.{name}.{attribute}")
    assert unknown == []
    # The check can fail: a misspelt attribute is not among them.
    email = providers["google"].resources["google_service_account"].attributes
    assert "email" in email and "emial" not in email and "unique_id" in email
