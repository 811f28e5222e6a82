"""The google (and google-beta) Terraform provider's schema, read from the CDKTF prebuilt provider packages.

The provider binary cannot be downloaded on these machines, but PyPI serves
``cdktf-cdktf-provider-google`` (and ``-beta``), generated from the provider's own schema: the wheel
bundles the npm package as ``_jsii/provider-google@<version>.jsii.tgz``, whose
``lib/<resource>/index.d.ts`` declares, for each resource and data source, its config interface
(``tfResourceType``), every argument and nested block with its Terraform name (the anchor of its
registry link), whether it is optional (``?``), and each block's own interface. Nothing is imported
(importing the package would start a Node.js runtime): the tarball is read as a file.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import hcl2

META_ARGUMENTS = {"for_each", "count", "depends_on", "provider", "lifecycle", "provisioner", "connection"}

_INTERFACE = re.compile(r"export interface (\w+)(?: extends ([\w.]+))? \{(.*?)\n\}", re.DOTALL)
_PROPERTY = re.compile(
    r"/\*\*(?:(?!\*/).)*?\{@link https://registry\.terraform\.io/providers/hashicorp/[\w-]+/(?P<version>[\d.]+)/docs/"
    r"(?:resources|data-sources)/\w+#(?P<name>\w+) [\w#]+\}(?:(?!\*/).)*?\*/\s*"
    r"readonly (?P<prop>\w+)(?P<optional>\?)?: (?P<type>[^;\n]+)",
    re.DOTALL,
)


@dataclass
class Block:
    """The arguments and nested blocks of a resource, a data source or a block."""

    arguments: dict[str, bool] = field(default_factory=dict)  # name -> required
    blocks: dict[str, tuple[bool, Block]] = field(default_factory=dict)  # name -> (required, schema)
    # Of a resource or data source: every attribute an expression may read (arguments, blocks and
    # computed attributes such as email, id, connection_name).
    attributes: set[str] = field(default_factory=set)


@dataclass
class Provider:
    version: str
    resources: dict[str, Block]
    data_sources: dict[str, Block]


def package_tarball(distribution: str) -> Path:
    """The npm tarball a CDKTF provider wheel bundles (no import of the package)."""
    dist = metadata.distribution(distribution)
    tarballs = [f for f in dist.files or [] if str(f).endswith(".jsii.tgz")]
    assert len(tarballs) == 1, f"{distribution}: {tarballs}"
    return Path(str(dist.locate_file(tarballs[0])))


def _lib_dirs(kind: str, tf_type: str) -> list[str]:
    """Where a type's declarations may be: google_cloud_run_v2_service -> lib/cloud-run-v2-service (the
    google package) or lib/google-cloud-run-v2-service (google-beta's); data google_project ->
    lib/data-google-project."""
    name = tf_type.removeprefix("google_").replace("_", "-")
    if kind == "data":
        return [f"package/lib/data-google-{name}/index.d.ts", f"package/lib/google-data-google-{name}/index.d.ts"]
    return [f"package/lib/{name}/index.d.ts", f"package/lib/google-{name}/index.d.ts"]


def _snake(name: str) -> str:
    """cdktf's property name -> Terraform's (connectionName -> connection_name)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _parse_declarations(text: str) -> tuple[str, str, Block]:
    """(tfResourceType, provider version, schema) of one index.d.ts."""
    tf_type = re.search(r'static readonly tfResourceType = "(\w+)"', text)
    assert tf_type, "no tfResourceType"
    interfaces = {m.group(1): (m.group(2), m.group(3)) for m in _INTERFACE.finditer(text)}
    versions: set[str] = set()

    def block(name: str, seen: frozenset[str]) -> Block:
        schema = Block()
        for prop in _PROPERTY.finditer(interfaces[name][1]):
            versions.add(prop.group("version"))
            required = prop.group("optional") is None
            nested = re.match(r"\(?(\w+)", prop.group("type").strip())
            struct = nested.group(1) if nested else ""
            if struct in interfaces and struct not in seen:
                schema.blocks[prop.group("name")] = (required, block(struct, seen | {struct}))
            else:
                schema.arguments[prop.group("name")] = required
        return schema

    config = next(n for n, (base, _body) in interfaces.items() if base == "cdktf.TerraformMetaArguments")
    root = block(config, frozenset({config}))
    resource_class = re.search(
        r"export declare class \w+ extends cdktf\.Terraform(?:Resource|DataSource) \{(.*?)\n\}", text, re.DOTALL
    )
    assert resource_class, "no resource class"
    getters = re.findall(r"^    get (\w+)\(\)", resource_class.group(1), re.MULTILINE)
    root.attributes = {_snake(g) for g in getters} | set(root.arguments) | set(root.blocks)
    assert len(versions) == 1, versions
    return tf_type.group(1), versions.pop(), root


def load(distribution: str, wanted: set[tuple[str, str]]) -> Provider:
    """The schema of each (kind, type) in ``wanted`` (kind: resource or data); missing ones are absent."""
    members = {path: (kind, tf_type) for kind, tf_type in wanted for path in _lib_dirs(kind, tf_type)}
    resources: dict[str, Block] = {}
    data_sources: dict[str, Block] = {}
    versions: set[str] = set()
    with tarfile.open(package_tarball(distribution), "r:gz") as archive:
        for member in archive:
            if member.name not in members:
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            declared, version, schema = _parse_declarations(handle.read().decode())
            kind, tf_type = members.pop(member.name)
            assert declared == tf_type, (member.name, declared, tf_type)
            versions.add(version)
            (resources if kind == "resource" else data_sources)[tf_type] = schema
            if len(resources) + len(data_sources) == len(wanted):
                break
    assert len(versions) <= 1, versions
    return Provider(versions.pop() if versions else "", resources, data_sources)


# -- the configuration side ------------------------------------------------------------------------


def parse_raw(path: Path) -> dict[str, Any]:
    """python-hcl2's parse, keeping its ``__is_block__`` marks (blocks vs. object-valued arguments)."""
    with path.open() as handle:
        parsed: dict[str, Any] = hcl2.load(handle)
    return parsed


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def declared(paths: list[Path]) -> list[tuple[Path, str, str, str, dict[str, Any]]]:
    """(file, kind, type, name, body) of every resource and data block, with the provider it uses."""
    found = []
    for path in paths:
        doc = parse_raw(path)
        for kind, key in (("resource", "resource"), ("data", "data")):
            for block in doc.get(key, []):
                for tf_type, named in block.items():
                    for name, body in named.items():
                        found.append((path, kind, _unquote(tf_type), _unquote(name), body))
    return found


def provider_of(body: dict[str, Any]) -> str:
    provider = str(body.get("provider", "google")).strip("${}")
    return provider.split(".")[0]


def check(body: dict[str, Any], schema: Block, where: str, top: bool = True) -> list[str]:
    """Every problem of a resource/block body against its schema: unknown arguments or blocks, an
    argument written as a block (or the reverse), a required argument or block not set."""
    problems = []
    present: set[str] = set()
    for raw_key, value in body.items():
        key = _unquote(raw_key)
        if key in ("__is_block__", "__comments__") or (top and key in META_ARGUMENTS):
            continue
        if key == "dynamic":
            for dynamic in value:
                for raw_name, spec in dynamic.items():
                    name = _unquote(raw_name)
                    present.add(name)
                    if name not in schema.blocks:
                        problems.append(f"{where}: dynamic block {name!r} is not a block here")
                        continue
                    for content in spec.get("content", []):
                        problems += check(content, schema.blocks[name][1], f"{where}.{name}", top=False)
            continue
        present.add(key)
        is_block = (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
        )
        if is_block:
            if key not in schema.blocks:
                what = "an argument, not a block" if key in schema.arguments else "unknown"
                problems.append(f"{where}: block {key!r} is {what}")
                continue
            for item in value:
                problems += check(item, schema.blocks[key][1], f"{where}.{key}", top=False)
        elif key not in schema.arguments:
            what = "a block, not an argument" if key in schema.blocks else "unknown"
            problems.append(f"{where}: argument {key!r} is {what}")
    for name, required in schema.arguments.items():
        if required and name not in present:
            problems.append(f"{where}: required argument {name!r} is not set")
    for name, (required, _block) in schema.blocks.items():
        if required and name not in present:
            problems.append(f"{where}: required block {name!r} is not set")
    return problems


_ATTRIBUTE_REFERENCE = re.compile(r"(?<![\w.])(data\.)?(google_\w+)\.(\w+)(?:\[[^\]]*\])?\.(\w+)")


def attribute_references(paths: list[Path]) -> list[tuple[Path, str, str, str, str]]:
    """(file, kind, type, name, attribute) of every ``google_x.name.attr`` / ``data.google_x.name.attr``
    an expression of the folder reads, where the folder declares ``google_x.name``."""
    found = []
    for folder in sorted({p.parent for p in paths}):
        files = [p for p in paths if p.parent == folder]
        local = {(kind, tf_type, name) for _p, kind, tf_type, name, _b in declared(files)}
        for path in files:
            for match in _ATTRIBUTE_REFERENCE.finditer(path.read_text()):
                kind = "data" if match.group(1) else "resource"
                if (kind, match.group(2), match.group(3)) in local:
                    found.append((path, kind, match.group(2), match.group(3), match.group(4)))
    return found
