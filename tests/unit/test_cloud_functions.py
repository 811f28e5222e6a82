"""Each HTTP role as a 2nd-gen Cloud Function from the same source (issue #22 item 9): the archive
functions/package_function.py writes, started the way Cloud Functions starts it, and the Terraform
option (roles[*].deployable) with the Cloud Build steps that upload and roll out that archive."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit import terraform_support

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "infra" / "modules"
STACK = MODULES / "stack"
sys.path.insert(0, str(ROOT / "functions"))
import package_function  # noqa: E402 - functions/ is not a package: the script as the build runs it

HTTP_ROLES = package_function.HTTP_ROLES


def _function_resource() -> dict[str, Any]:
    parsed = terraform_support.parse(MODULES / "cloud_function" / "main.tf")
    return next(
        body
        for block in parsed["resource"]
        for kind, named in block.items()
        if kind == "google_cloudfunctions2_function"
        for body in named.values()
    )


def _steps() -> dict[str, dict[str, Any]]:
    return {step["id"]: step for step in yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())["steps"]}


def test_every_http_role_has_an_entry_point_and_the_runtime_has_none() -> None:
    built = {p.parent.name for p in (ROOT / "functions").glob("*/main.py")}
    assert set(HTTP_ROLES) == built - {"subscription_runtime"}
    with pytest.raises(ValueError, match="not an HTTP role"):
        package_function.members("subscription_runtime")


@pytest.mark.parametrize("role", HTTP_ROLES)
def test_the_archive_holds_the_roles_main_the_package_and_the_images_lock(role: str, tmp_path: Path) -> None:
    archive = tmp_path / f"{role}.zip"
    count = package_function.write(role, archive)
    with zipfile.ZipFile(archive) as zipped:
        names = zipped.namelist()
        assert len(names) == count and names == sorted(names)
        assert zipped.read("main.py") == (ROOT / "functions" / role / "main.py").read_bytes()
        assert zipped.read("requirements.txt") == (ROOT / "functions" / "requirements.lock").read_bytes()
        package = ROOT / "shared" / "noetl_cloud"
        sources = {f"noetl_cloud/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
        assert sources <= set(names)  # the whole package, its data files too
        assert "noetl_cloud/demo/resources/orders.playbook.yaml" in names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    again = tmp_path / "again.zip"
    package_function.write(role, again)
    assert again.read_bytes() == archive.read_bytes()  # the same commit, the same bytes


@pytest.mark.parametrize("role", ["execute", "worker"])
def test_the_archive_starts_as_cloud_functions_starts_it(role: str, tmp_path: Path) -> None:
    """functions-framework loads main.py from the unpacked source and finds the target named after the
    role; the noetl_cloud it imports is the archive's own, not the checkout's."""
    archive = tmp_path / f"{role}.zip"
    package_function.write(role, archive)
    source = tmp_path / "source"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(source)
    check = (
        "import functions_framework, noetl_cloud, sys\n"
        f"app = functions_framework.create_app(target={role!r}, source='main.py')\n"
        "assert app is not None\n"
        "print(noetl_cloud.__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=source, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).resolve() == (source / "noetl_cloud" / "__init__.py").resolve()


def test_the_function_serves_the_role_from_the_archive_the_build_uploads() -> None:
    function = _function_resource()
    config = function["build_config"][0]
    assert config["entry_point"] == "${var.role}"
    assert config["runtime"] == "${var.runtime}"
    source = config["source"][0]["storage_source"][0]
    assert (source["bucket"], source["object"]) == ("${var.source_archive.bucket}", "${var.source_archive.object}")
    assert function["lifecycle"][0]["ignore_changes"] == ["${build_config[0].source}"]
    # The runtime matches the image's Python (the lock is resolved for CPython 3.11).
    variables = {
        n: b
        for blk in terraform_support.parse(MODULES / "cloud_function" / "variables.tf")["variable"]
        for n, b in blk.items()
    }
    assert variables["runtime"]["default"] == "python311"
    assert "python:3.11" in (ROOT / "functions" / "Dockerfile").read_text()
    # The stack points each function at the build-source bucket, at the name the build writes first.
    call = terraform_support.parse(STACK / "functions.tf")["module"][0]["function"]
    assert call["source_archive"] == {
        "bucket": "${module.build_source_bucket.name}",
        "object": "${format(local.function_source_object, each.value.role)}",
    }
    split = {k: v for b in terraform_support.parse(STACK / "functions.tf")["locals"] for k, v in b.items()}
    assert split["function_source_object"] == "functions/%s.zip"
    package = "\n".join(_steps()["package-functions"]["args"])
    assert 'bucket="gs://${_NAME_PREFIX}-build-source-${PROJECT_ID}/functions"' in package
    assert 'gcloud storage cp --no-clobber "/workspace/function-$$role.zip" "$$bucket/$$role.zip"' in package
    assert f"for role in {' '.join(HTTP_ROLES)}; do" in package
    assert 'python3 functions/package_function.py "$$role"' in package
    bucket = terraform_support.parse(STACK / "main.tf")["module"]
    names = [b["build_source_bucket"]["name"] for b in bucket if "build_source_bucket" in b]
    assert names == ["${var.name_prefix}-build-source-${var.project_id}"]


def test_every_build_rolls_out_the_functions_of_each_role_with_that_builds_archive() -> None:
    steps = _steps()
    ids = list(steps)
    assert ids.index("push-image") < ids.index("package-functions") < ids.index("migrate-database")
    labels = _function_resource()["labels"]
    assert '"noetl-function" = replace(var.role, "_", "-")' in labels and '"noetl-stack" = var.stack' in labels
    for role in HTTP_ROLES:
        script = "\n".join(steps[f"deploy-{role}"]["args"])
        label = role.replace("_", "-")
        assert f'--filter "labels.noetl-stack=${{_NAME_PREFIX}} AND labels.noetl-function={label}"' in script, role
        assert (
            'gcloud functions deploy "$$function" --gen2 --region "${_REGION}" --source '
            f'"gs://${{_NAME_PREFIX}}-build-source-${{PROJECT_ID}}/functions/${{BUILD_ID}}/{role}.zip"'
        ) in script
        assert 'if [ -z "$$services$$functions" ]' in script
    assert "functions" not in "\n".join(steps["deploy-subscription_runtime"]["args"]).replace("functions/", "")


def test_the_roles_map_chooses_run_or_function_and_refuses_what_a_function_cannot_be() -> None:
    variables = {n: b for blk in terraform_support.parse(STACK / "variables.tf")["variable"] for n, b in blk.items()}
    roles = variables["roles"]
    assert 'deployable = optional(string, "run")' in roles["type"]
    conditions = " ".join(v["condition"] for v in roles["validation"])
    assert 'contains(["run", "function"], v.deployable)' in conditions
    assert 'r != "subscription_runtime"' in conditions  # a pull consumer stays on Cloud Run
    assert 'v.deployable == "run" || v.cpu_idle' in conditions  # a function's CPU is throttled between requests
    assert all(r.get("deployable", "run") == "run" for r in roles["default"].values())  # Cloud Run by default
    # Every ingress value the roles map accepts has a Cloud Functions equivalent.
    parsed = terraform_support.parse(MODULES / "cloud_function" / "main.tf")
    mapping = next(b["ingress_settings"] for b in parsed["locals"] if "ingress_settings" in b)
    values = {r.get("ingress", "INGRESS_TRAFFIC_INTERNAL_ONLY") for r in roles["default"].values()}
    assert values <= set(mapping) and set(mapping.values()) == {
        "ALLOW_ALL",
        "ALLOW_INTERNAL_ONLY",
        "ALLOW_INTERNAL_AND_GCLB",
    }
