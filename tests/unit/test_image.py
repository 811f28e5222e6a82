"""The image is reproducible: its base is named by digest, its runtime dependencies and its build
backend come from hashed locks, and the package's build-system requirement is one that builds it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version as installed_version
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "functions" / "requirements.lock"
BUILD_LOCK = ROOT / "functions" / "build-requirements.lock"
DOCKERFILE = ROOT / "functions" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# How the image's build stage builds the package: nothing fetched, against the installed backend.
OFFLINE_WHEEL = ["--no-deps", "--no-index", "--no-build-isolation"]
_ENTRY = re.compile(r"^([A-Za-z0-9._-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.MULTILINE)


def _locked(lock: Path = LOCK) -> dict[str, Version]:
    text = lock.read_text()
    entries = _ENTRY.findall(text)
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(body) == 2 * len(entries), "every line of the lock is a name==version and its hash"
    return {canonicalize_name(name): Version(version) for name, version, _digest in entries}


def test_the_lock_pins_every_runtime_dependency_within_its_range_and_nothing_of_the_dev_extra() -> None:
    locked = _locked()
    assert len(locked) >= 40
    for spec in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is a runtime dependency missing from the lock (make lock)"
        assert requirement.specifier.contains(locked[name], prereleases=True), (spec, locked[name])
    extras = PYPROJECT["project"]["optional-dependencies"]
    dev_only = {canonicalize_name(Requirement(s).name) for s in [*extras["dev"], *extras["local"]]}
    runtime = {canonicalize_name(Requirement(s).name) for s in PYPROJECT["project"]["dependencies"]}
    assert not (dev_only - runtime) & set(locked), sorted((dev_only - runtime) & set(locked))
    assert "noetl-cloud" not in locked


def test_the_dockerfile_installs_the_locks_with_hashes_and_builds_the_package_offline() -> None:
    text = DOCKERFILE.read_text()
    assert "COPY functions/requirements.lock ./requirements.lock" in text
    assert "COPY functions/build-requirements.lock ./build-requirements.lock" in text
    assert "/opt/venv/bin/pip install --require-hashes --no-deps -r requirements.lock" in text
    # The build backend in a venv of its own (never copied into the runtime stage), then the wheel
    # built against it with nothing fetched, then installed without resolving again.
    assert "/opt/build/bin/pip install --require-hashes --no-deps -r build-requirements.lock" in text
    build = "/opt/build/bin/pip wheel --no-deps --no-index --no-build-isolation --wheel-dir /tmp/wheels ."
    install = "/opt/venv/bin/pip install --no-deps --no-index /tmp/wheels/noetl_cloud-*.whl"
    assert build in text and install in text
    assert text.index("-r build-requirements.lock") < text.index(build) < text.index(install)
    assert "COPY --from=build /opt/venv /opt/venv" in text and "COPY --from=build /opt/build" not in text
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!functions/" in ignore  # the locks are in the build context
    # A developer's editable install leaves shared/noetl_cloud.egg-info: not part of what is built.
    assert "**/*.egg-info" in ignore


def test_the_build_system_requires_a_setuptools_that_reads_the_license_string() -> None:
    build = PYPROJECT["build-system"]
    setuptools = next(Requirement(r) for r in build["requires"] if Requirement(r).name == "setuptools")
    assert isinstance(PYPROJECT["project"]["license"], str)  # PEP 639 form: setuptools >= 77 reads it
    assert not setuptools.specifier.contains("76.1.0") and setuptools.specifier.contains("77.0.3")
    assert build["build-backend"] == "setuptools.build_meta"


def test_the_build_lock_pins_exactly_the_build_system_requirements() -> None:
    locked = _locked(BUILD_LOCK)
    requires = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    assert set(locked) == {canonicalize_name(r.name) for r in requires}
    for requirement in requires:
        assert requirement.specifier.contains(locked[canonicalize_name(requirement.name)]), requirement


def test_the_wheel_builds_offline_with_the_installed_build_backend(tmp_path: Path) -> None:
    """What the image's build stage does: ``pip wheel --no-index --no-build-isolation`` on the files the
    Dockerfile copies, with the locked setuptools (``make install`` and the build's test step install
    it). The wheel carries every module and data file of the package and the PEP 639 licence."""
    setuptools = Version(installed_version("setuptools"))
    assert setuptools == _locked(BUILD_LOCK)["setuptools"], (
        f"this venv has setuptools {setuptools}, not the locked build backend: make install"
    )
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "shared", source / "shared", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )
    out = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *OFFLINE_WHEEL, "--quiet", "--wheel-dir", str(out), "."],
        cwd=source,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("noetl_cloud-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    package = ROOT / "shared" / "noetl_cloud"
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["noetl_cloud"]
    expected = {f"noetl_cloud/{p.relative_to(package)}" for p in package.rglob("*.py")}
    expected |= {f"noetl_cloud/{p.relative_to(package)}" for pattern in data for p in package.glob(pattern)}
    assert len(expected) > 100 and not expected - names, sorted(expected - names)[:10]
    assert "License-Expression: MIT" in metadata.splitlines()


# -- the base image by digest -----------------------------------------------------------------------

_PINNED = re.compile(r"^python:3\.11-slim@sha256:[0-9a-f]{64}$")


def test_the_base_image_is_named_by_digest_in_the_dockerfile_and_the_build() -> None:
    text = DOCKERFILE.read_text()
    default = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert default and _PINNED.match(default.group(1)), "functions/Dockerfile: PYTHON_IMAGE has no digest"
    # Every stage starts from that argument, never from a literal image.
    assert re.findall(r"^FROM (\S+)", text, re.MULTILINE) == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    build = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    assert build["substitutions"]["_PYTHON_IMAGE"] == default.group(1)
    steps = {step["id"]: step for step in build["steps"]}
    args = steps["build-image"]["args"]
    assert "--build-arg=PYTHON_IMAGE=${_PYTHON_IMAGE}" in args
    assert "--label=org.opencontainers.image.base.name=${_PYTHON_IMAGE}" in args
    # The documented digest is the one used.
    assert default.group(1) in (ROOT / "docs" / "deploy.md").read_text()


def _check_substitutions(tmp_path: Path, python_image: str) -> subprocess.CompletedProcess[str]:
    step = {s["id"]: s for s in yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())["steps"]}["check-substitutions"]
    script = step["args"][-1].replace("${_REGION}", "europe-west1").replace("${_PYTHON_IMAGE}", python_image)
    script = script.replace("$$", "$")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path)


def test_the_build_refuses_a_base_image_named_by_tag_only(tmp_path: Path) -> None:
    pinned = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())["substitutions"]["_PYTHON_IMAGE"]
    assert _check_substitutions(tmp_path, pinned).returncode == 0
    for unpinned in ("python:3.11-slim", "python:3.11-slim@sha256:abc", "python@sha256:" + "0" * 63):
        refused = _check_substitutions(tmp_path, unpinned)
        assert refused.returncode == 1 and "must name its digest" in refused.stderr, unpinned
