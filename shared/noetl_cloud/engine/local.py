"""Run a playbook file in this process: what ``noetl-cloud run`` does.

Child playbooks (``kind: playbook`` tasks) are files too: their ``path`` is read relative to the parent's
folder (``.yaml`` added when missing). Events go to a JSONL file when asked, one canonical envelope per line.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from noetl_cloud.engine.events import EventSink, MemorySink
from noetl_cloud.engine.outcome import Clock, Outcome, ToolResolver
from noetl_cloud.engine.payloads import MemoryPayloadStore
from noetl_cloud.engine.runner import Engine, ExecutionResult
from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.errors import BadRequest, NotFound
from noetl_cloud.spec import PlaybookDoc, parse_document


class JsonlSink:
    """Writes each event as one canonical JSON line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._lock = threading.Lock()  # child playbooks of parallel iterations share the sink

    def emit(self, event: EventEnvelope) -> None:
        """Write ``event`` and flush."""
        line = event.to_json() + "\n"
        with self._lock:
            self.stream.write(line)
            self.stream.flush()


class _Tee:
    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def emit(self, event: EventEnvelope) -> None:
        for sink in self.sinks:
            sink.emit(event)


def parse_sets(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs as workload overrides; values are read as YAML scalars, dotted keys nest."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise BadRequest(f"--set expects key=value, got '{pair}'", code="usage")
        value = yaml.safe_load(text) if text else ""
        node = overrides
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BadRequest(f"--set {key}: '{part}' is already a value", code="usage")
            node = child
        node[leaf] = value
    return overrides


def load_playbook(path: Path) -> PlaybookDoc:
    """Read and validate a playbook file; :class:`NotFound` if missing, ``ValidationFailed`` if invalid.

    The checks are registration's (the catalog runs the same): a file the control plane would refuse is
    refused here before it runs, with the same problems.
    """
    from noetl_cloud.engine.validate import validate_playbook

    if not path.is_file():
        raise NotFound(f"no playbook file at {path}")
    doc = parse_document(path.read_text(encoding="utf-8"))
    if not isinstance(doc, PlaybookDoc):
        raise BadRequest(f"{path} is a {doc.kind}, not a Playbook", code="not_a_playbook")
    validate_playbook(doc)
    return doc


def run_file(
    path: Path,
    overrides: dict[str, Any] | None = None,
    *,
    tools: ToolResolver | None = None,
    events: IO[str] | None = None,
    sink: EventSink | None = None,
    clock: Clock | None = None,
    keychain: Mapping[str, Any] | None = None,
) -> ExecutionResult:
    """Run the playbook at ``path`` to its end and return how it ended.

    ``keychain`` maps credential aliases to entries (``{"pg_local": {"kind": "postgres", "dsn": ...}}``); child
    playbooks see the same keychain. A child started from a loop iteration sees that iteration as
    ``iter.parent``.
    """
    if tools is None:
        from noetl_cloud.tools.registry import default_registry

        tools = default_registry()
    sinks: list[EventSink] = [sink or MemorySink()]
    if events is not None:
        sinks.append(JsonlSink(events))
    holder: dict[str, Engine] = {}

    def run_child(child: str, args: dict[str, Any], parent_iter: Mapping[str, Any] | None = None) -> Outcome:
        target = (path.parent / child) if Path(child).suffix else (path.parent / f"{child}.yaml")
        result = holder["engine"].run(load_playbook(target), args, keychain=keychain, parent_iter=parent_iter)
        body = {
            "execution_id": result.execution_id,
            "status": result.status,
            "ctx": result.ctx,
            "results": result.results,
        }
        if result.status == "completed":
            return Outcome.ok(body)
        failed = Outcome.fail("child_failed", f"child playbook {child} failed")
        return Outcome("error", body, {**(failed.error or {}), "child": result.error})

    engine = Engine(tools=tools, sink=_Tee(*sinks), clock=clock, payloads=MemoryPayloadStore(), run_child=run_child)
    holder["engine"] = engine
    return engine.run(load_playbook(path), overrides, keychain=keychain)
