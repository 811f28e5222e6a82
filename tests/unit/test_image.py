"""The image is reproducible: its runtime dependencies come from a hashed lock, and the package's
build-system requirement is one that builds it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "functions" / "requirements.lock"
DOCKERFILE = ROOT / "functions" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
_ENTRY = re.compile(r"^([A-Za-z0-9._-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.MULTILINE)


def _locked() -> dict[str, Version]:
    text = LOCK.read_text()
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


def test_the_dockerfile_installs_the_lock_with_hashes_and_the_package_without_resolving_again() -> None:
    text = DOCKERFILE.read_text()
    assert "COPY functions/requirements.lock ./requirements.lock" in text
    assert "pip install --require-hashes --no-deps -r requirements.lock" in text
    assert "pip install --no-deps ." in text
    assert text.index("--require-hashes") < text.index("pip install --no-deps .")
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!functions/" in ignore  # the lock is in the build context


def test_the_build_system_requires_a_setuptools_that_reads_the_license_string() -> None:
    build = PYPROJECT["build-system"]
    setuptools = next(Requirement(r) for r in build["requires"] if Requirement(r).name == "setuptools")
    assert isinstance(PYPROJECT["project"]["license"], str)  # PEP 639 form: setuptools >= 77 reads it
    assert not setuptools.specifier.contains("76.1.0") and setuptools.specifier.contains("77.0.3")
    assert build["build-backend"] == "setuptools.build_meta"
