"""Downstream circuits (RFC §8.1, OQ2): the declaration, the mapping of tool errors, the counting,
the gate that spools while one is open, and the drainer's probe carried to the execution's end."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl_cloud.engine.outcome import ToolCall
from noetl_cloud.spec import SubscriptionDoc, parse_document
from noetl_cloud.spec.downstreams import Downstream
from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool.circuit import CircuitBreaker, CircuitConfig
from noetl_cloud.spool.downstreams import (
    DownstreamWatcher,
    ToolFailure,
    claimed_by,
    downstream_id,
    retryable,
    tool_failures,
    verdicts,
)
from noetl_cloud.spool.replayer import replay_request
from noetl_cloud.spool.target import SpoolTarget
from noetl_cloud.tools.http import HttpTool, target_of
from tests.unit.spec_support import problem_at, rejection
from tests.unit.spool_support import DOWNSTREAM, SUB, World, world

SPECS = Path(__file__).resolve().parent.parent / "data" / "specs"
API = Downstream(name="orders-api", http_hosts=["orders.example.com"])
PINNED = Downstream(name="pinned", http_hosts=["api.example.com:8443"])
WAREHOUSE = Downstream(name="warehouse", postgres_auth=["warehouse_rw"])
LEDGER = Downstream(name="ledger", steps=["post_ledger"])
DECLARED = [API, PINNED, WAREHOUSE, LEDGER]


def stripe(**spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((SPECS / "subscription_stripe_webhook.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["spec"].update(spec)
    return doc


def failed(kind: str, *, step: str = "call", status: int | None = None, **target: Any) -> dict[str, Any]:
    """An execution's error as the orchestrator records it: the step's error around the tool's."""
    tool: dict[str, Any] = {"kind": kind, "message": "x", "task": "t", "target": target}
    if status is not None:
        tool["status"] = status
    return {"kind": "step_failed", "step": step, "error": tool}


# -- the declaration --------------------------------------------------------------------------------


def test_a_subscription_declares_its_downstreams() -> None:
    downstreams = [
        {"name": "orders-api", "http_hosts": ["Orders.Example.com", "orders.example.com:8443"]},
        {"name": "warehouse", "postgres_auth": ["warehouse_rw"], "steps": ["load"]},
    ]
    doc = parse_document(yaml.safe_dump(stripe(downstreams=downstreams)))
    assert isinstance(doc, SubscriptionDoc)
    assert [d.name for d in doc.spec.downstreams] == ["orders-api", "warehouse"]
    assert doc.spec.downstreams[0].http_hosts == ["orders.example.com", "orders.example.com:8443"]  # lower-cased


def test_no_downstreams_by_default() -> None:
    doc = parse_document(yaml.safe_dump(stripe()))
    assert isinstance(doc, SubscriptionDoc) and doc.spec.downstreams == []


@pytest.mark.parametrize(
    ("spec", "field", "problem_type", "says"),
    [
        (
            {"downstreams": [{"name": "db", "postgres_auth": ["db"]}], "spool": {"mode": "off"}},
            "spec.downstreams",
            "spool_required",
            "need a spool",
        ),
        (
            {"downstreams": [{"name": "db", "steps": ["a"]}, {"name": "db", "steps": ["b"]}]},
            "spec.downstreams.1.name",
            "duplicate_downstream",
            "already declared at downstreams.0",
        ),
        ({"downstreams": [{"name": "db"}]}, "spec.downstreams.0", "matcher_required", "at least one of"),
        (
            {"downstreams": [{"name": "a", "http_hosts": ["h.io"]}, {"name": "b", "http_hosts": ["H.io"]}]},
            "spec.downstreams.1.http_hosts",
            "ambiguous_downstream",
            "already claimed by downstream a",
        ),
        (
            {"downstreams": [{"name": "Bad Name", "steps": ["a"]}]},
            "spec.downstreams.0.name",
            "string_pattern_mismatch",
            "",
        ),
        ({"downstreams": [{"name": "a", "http_hosts": ["http://h.io/x"]}]}, "spec.downstreams.0.http_hosts.0", "", ""),
        ({"downstreams": [{"name": "a", "steps": ["s"], "kind": "x"}]}, "spec.downstreams.0.kind", "", ""),
    ],
)
def test_bad_declarations_are_refused_with_the_field_named(
    spec: dict[str, Any], field: str, problem_type: str, says: str
) -> None:
    problem = problem_at(rejection(stripe(**spec)), field)
    assert problem_type in problem["type"] and says in problem["problem"]


# -- mapping a failure to a downstream ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "expected"),
    [
        ("connection", None, True),
        ("timeout", None, True),
        ("http_status", 503, True),
        ("http_status", 500, True),
        ("http_status", 429, True),
        ("http_status", 404, False),
        ("http_status", 400, False),
        ("integrity_violation", None, False),
        ("bad_task", None, False),
    ],
)
def test_only_unavailability_is_retryable(kind: str, status: int | None, expected: bool) -> None:
    assert retryable(ToolFailure(kind, status, {}, None)) is expected


def test_failures_are_claimed_by_host_port_alias_then_step() -> None:
    def claim(step: str | None = None, **target: Any) -> str | None:
        found = claimed_by(DECLARED, ToolFailure("connection", None, target, step))
        return None if found is None else found.name

    assert claim(http_host="orders.example.com", http_port=443) == "orders-api"
    assert claim(http_host="ORDERS.example.com", http_port=80) == "orders-api"
    assert claim(http_host="api.example.com", http_port=8443) == "pinned"
    assert claim(http_host="api.example.com", http_port=443) is None  # pinned to another port
    assert claim(postgres_auth="warehouse_rw") == "warehouse"
    assert claim(postgres_auth="other") is None
    assert claim("post_ledger", http_host="elsewhere.io", http_port=443) == "ledger"
    assert claim("other_step") is None


def test_the_tool_error_is_found_inside_the_step_error() -> None:
    (found,) = tool_failures(failed("http_status", status=503, http_host="orders.example.com", http_port=443))
    assert (found.kind, found.status, found.step) == ("http_status", 503, "call")


def test_verdicts_of_an_ended_execution() -> None:
    orders_down = failed("http_status", status=503, http_host="orders.example.com", http_port=443)
    assert verdicts(DECLARED, "failed", orders_down) == {"orders-api": "failed"}
    assert verdicts(DECLARED, "failed", failed("connection", postgres_auth="warehouse_rw")) == {"warehouse": "failed"}
    # a 404 is the request's fault, a timeout elsewhere is not a declared downstream's
    assert verdicts(DECLARED, "failed", failed("http_status", status=404, http_host="orders.example.com")) == {}
    assert verdicts(DECLARED, "failed", failed("timeout", http_host="other.io", http_port=443)) == {}
    assert verdicts(DECLARED, "completed", None) == {d.name: "ok" for d in DECLARED}
    assert verdicts(DECLARED, "cancelled", None) == {}
    # the probe's execution, failed for another reason, says its downstream answered
    assert verdicts(DECLARED, "failed", {"kind": "template_error"}, {"orders-api": "h"}) == {"orders-api": "ok"}
    assert verdicts(DECLARED, "failed", orders_down, {"orders-api": "h"}) == {"orders-api": "failed"}


def test_the_http_tool_names_its_target_in_the_error() -> None:
    assert target_of("https://Orders.Example.com/v1/x?y=1") == {"http_host": "orders.example.com", "http_port": 443}
    assert target_of("http://127.0.0.1:8080/") == {"http_host": "127.0.0.1", "http_port": 8080}
    call = ToolCall("http", {"url": "http://10.255.255.1:9/x"}, {"timeout": 0.2}, "1", "s", "t", 1)
    outcome = HttpTool().run(call)  # refused by the default egress policy: not the downstream's fault
    assert outcome.error is not None and outcome.error["kind"] == "egress_denied"


# -- counting, gating, probing --------------------------------------------------------------------


class Catalog:
    def __init__(self, downstreams: list[Downstream]) -> None:
        self.downstreams = downstreams
        self.asked = 0

    def __call__(self, path: str) -> tuple[Spool, list[Downstream]] | None:
        self.asked += 1
        if path != SUB:
            return None
        return Spool(
            mode="buffer_and_ack", backend="gcs", circuit={"trip_after": 2, "probe_after_ms": 1000}
        ), self.downstreams  # type: ignore[arg-type]


def watched(w: World) -> tuple[DownstreamWatcher, SpoolTarget]:
    watcher = DownstreamWatcher(w.kv, Catalog([API]), w.journal, clock=w.clock, monotonic=w.clock.monotonic)
    block = {
        "mode": "buffer_and_ack",
        "backend": "gcs",
        "ordering": "global",
        "circuit": {"trip_after": 2, "probe_after_ms": 1000},
    }
    target = SpoolTarget.from_spec(SUB, block, source_kind="push", downstream=DOWNSTREAM, downstreams=[API])
    return watcher, target


def breaker(w: World) -> CircuitBreaker:
    return CircuitBreaker(w.kv, downstream_id(SUB, "orders-api"), CircuitConfig(2, 1000))


ORDERS_503 = failed("http_status", status=503, http_host="orders.example.com", http_port=443)


def test_failures_open_the_circuit_and_the_gate_spools() -> None:
    w = world()
    watcher, target = watched(w)
    assert w.engine.gate(target).action == "dispatch"
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    assert breaker(w).state().consecutive_failures == 1
    assert w.engine.gate(target).action == "dispatch"  # below trip_after
    watcher.observe(SUB, "e2", "failed", ORDERS_503)
    assert breaker(w).state().state == "open"
    opened = [e for e in w.sink.events if e.event_type == "subscription.circuit.opened"]
    assert len(opened) == 1 and opened[0].payload["downstream"] == downstream_id(SUB, "orders-api")
    gate = w.engine.gate(target)
    assert (gate.action, gate.reason) == ("spool", "downstream_open")
    # a straggler's late failure does not restart the timer; a success of an unrelated subscription counts nothing
    watcher.observe(SUB, "e0", "failed", ORDERS_503)
    assert watcher.observe("subscriptions/other", "e9", "completed", None) == {}
    assert [e.event_type for e in w.sink.events].count("subscription.circuit.opened") == 1


def test_a_success_resets_the_count_below_trip_after() -> None:
    w = world()
    watcher, _target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "completed", None)
    watcher.observe(SUB, "e3", "failed", ORDERS_503)
    assert breaker(w).state().state == "closed" and breaker(w).state().consecutive_failures == 1


def test_the_drainer_probes_with_the_oldest_item_and_its_execution_closes_the_circuit() -> None:
    w = world()
    watcher, target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "failed", ORDERS_503)
    for n in range(1, 5):
        w.spool(target, n, key=None, reason="downstream_open")
    drainer = w.drainer()
    report = drainer.drain(target)
    assert report.state == "circuit_open" and w.control.executions == []  # the probe is not due yet
    w.clock.advance(1.5)
    report = drainer.drain(target)
    assert report.state == "probing" and report.probed
    (probe,) = w.control.executions
    assert probe["workload"]["n"] == 1
    holders = probe["meta"]["spool"]["probe"]
    assert set(holders) == {"orders-api"} and breaker(w).state().state == "half_open"
    assert drainer.drain(target).state == "circuit_open"  # nothing more while the probe runs
    assert w.engine.gate(target).action == "spool"
    # the probe's execution fails again: re-opened, fresh timer
    watcher.observe(SUB, "p1", "failed", ORDERS_503, holders)
    assert breaker(w).state().state == "open"
    w.clock.advance(1.5)
    assert drainer.drain(target).state == "probing"
    assert len(w.control.executions) == 2 and w.control.executions[1]["workload"]["n"] == 2
    holders = w.control.executions[1]["meta"]["spool"]["probe"]
    watcher.observe(SUB, "p2", "completed", None, holders)
    assert breaker(w).state().state == "closed"
    assert "subscription.circuit.closed" in [e.event_type for e in w.sink.events]
    report = drainer.drain(target)
    assert report.state == "drained"
    assert [r["workload"]["n"] for r in w.control.executions] == [1, 2, 3, 4]  # in order, none twice
    assert w.engine.gate(target).action == "dispatch"


def test_a_probe_request_carries_its_holders() -> None:
    w = world()
    _watcher, target = watched(w)
    spooled = w.spool(target, 1, key=None)
    from noetl_cloud.spool.replayer import with_probe

    request = replay_request(with_probe(spooled.item, {"orders-api": "h1"}), b'{"n": 1}')
    assert request["meta"]["spool"]["probe"] == {"orders-api": "h1"}
    assert "probe" not in replay_request(spooled.item, b'{"n": 1}')["meta"]["spool"]


def test_the_watcher_reads_the_catalog_once_per_cache_period() -> None:
    w = world()
    catalog = Catalog([API])
    watcher = DownstreamWatcher(w.kv, catalog, w.journal, monotonic=w.clock.monotonic, cache_s=10)
    for n in range(5):
        watcher.observe(SUB, str(n), "completed", None)
    assert catalog.asked == 1
    w.clock.advance(11)
    watcher.observe(SUB, "6", "completed", None)
    assert catalog.asked == 2


def test_a_probe_item_already_run_passes_the_probe_to_the_next_item() -> None:
    w = world()
    watcher, target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "failed", ORDERS_503)
    first = w.spool(target, 1, key=None, reason="downstream_open")
    w.spool(target, 2, key=None, reason="downstream_open")
    w.control.replay(first.item, b'{"n": 1, "key": null}')  # replayed by a drainer that died before deleting it
    w.clock.advance(1.5)
    assert w.drainer().drain(target).state == "probing"
    assert [r["workload"]["n"] for r in w.control.executions] == [1, 2]
    assert w.control.executions[1]["meta"]["spool"]["probe"] == {"orders-api": breaker(w).state().probe_holder}
    assert len(w.backend.list(SUB)) == 0


def test_a_drain_waits_for_its_probe_and_drains_the_rest_in_the_same_run() -> None:
    w = world()
    watcher, target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "failed", ORDERS_503)
    for n in range(1, 4):
        w.spool(target, n, key=None, reason="downstream_open")
    w.clock.advance(1.5)
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # the probe's execution ends while the drainer polls
        polls.append(seconds)
        w.clock.sleep(seconds)
        if len(polls) == 2:
            holders = w.control.executions[0]["meta"]["spool"]["probe"]
            watcher.observe(SUB, "p", "completed", None, holders)

    report = w.drainer(probe_wait_s=20.0, sleep=sleep).drain(target)
    assert (report.state, report.replayed, report.probed) == ("drained", 3, True)
    assert [r["workload"]["n"] for r in w.control.executions] == [1, 2, 3]
    assert "probe" not in w.control.executions[1]["meta"]["spool"]


def test_a_drain_stops_waiting_when_its_probe_fails() -> None:
    w = world()
    watcher, target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "failed", ORDERS_503)
    w.spool(target, 1, key=None, reason="downstream_open")
    w.spool(target, 2, key=None, reason="downstream_open")
    w.clock.advance(1.5)

    def sleep(seconds: float) -> None:
        w.clock.sleep(seconds)
        watcher.observe(SUB, "p", "failed", ORDERS_503, w.control.executions[0]["meta"]["spool"]["probe"])

    report = w.drainer(probe_wait_s=20.0, sleep=sleep).drain(target)
    assert report.state == "probing" and len(w.control.executions) == 1
    assert breaker(w).state().state == "open"


def _tripped(w: World) -> None:
    watcher, _target = watched(w)
    watcher.observe(SUB, "e1", "failed", ORDERS_503)
    watcher.observe(SUB, "e2", "failed", ORDERS_503)


def test_the_runtime_gate_holds_a_pull_subscription_by_its_spool_mode() -> None:
    from noetl_cloud.runtime.spooler import RuntimeSpooler
    from noetl_cloud.spool.engine import CircuitOpen

    w = world()
    circuit = {"trip_after": 2, "probe_after_ms": 1000}
    buffered = RuntimeSpooler(
        w.engine, SUB, {"mode": "buffer_and_ack", "backend": "gcs", "circuit": circuit}, DOWNSTREAM, [API]
    )
    hybrid = RuntimeSpooler(w.engine, SUB, {"mode": "hybrid", "backend": "gcs", "circuit": circuit}, DOWNSTREAM, [API])
    assert buffered.gate().action == "dispatch" and hybrid.gate().action == "dispatch"
    _tripped(w)
    assert buffered.gate().action == "spool"
    with pytest.raises(CircuitOpen):  # a pull source keeps its messages through a short outage
        hybrid.gate()
    w.clock.advance(61)  # hybrid_escalate_after_ms (60 s) passed: spool
    assert hybrid.gate().action == "spool"


def test_the_ingress_gate_reads_the_downstreams_of_the_listener_configuration() -> None:
    from noetl_cloud.spool.ingress import IngressSpooler

    w = world()
    spooler = IngressSpooler(w.engine, DOWNSTREAM)
    config: dict[str, Any] = {"path": SUB, "spool": {"mode": "buffer_and_ack", "backend": "gcs"}}
    assert spooler.target(config).downstreams == ()
    declared = {**config, "downstreams": [{"name": "orders-api", "http_hosts": ["orders.example.com"]}]}
    assert spooler.target(declared).downstreams == (downstream_id(SUB, "orders-api"),)  # a new declaration is read
