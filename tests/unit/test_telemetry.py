"""noetl_cloud.telemetry: no span objects when off; spans, their parents and the W3C context when on;
metrics through OpenTelemetry; the trace link's endpoint."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from noetl_cloud import telemetry
from noetl_cloud.messaging.port import OutboundMessage
from noetl_cloud.observability import Counters, current_trace
from noetl_cloud.settings import Settings
from noetl_cloud.telemetry import traces
from noetl_cloud.telemetry.localexport import read_spans
from noetl_cloud.web import create_app
from noetl_cloud.web.errors import register_error_handlers

UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def settings(folder: Path, **changes: Any) -> Settings:
    base = {"tracing": "local", "metrics": "local", "telemetry_dir": str(folder), "metrics_export_s": 3600}
    return Settings(**{**base, **changes})


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Path]:
    telemetry.configure(settings(tmp_path), "test")
    yield tmp_path
    telemetry.shutdown()


def flushed(folder: Path) -> list[dict[str, Any]]:
    telemetry.shutdown()  # flushes the batch processor and the metric reader
    return list(read_spans(folder))


def test_off_creates_no_span_objects() -> None:
    telemetry.shutdown()
    assert not telemetry.tracing()
    first, second = telemetry.span("a"), telemetry.span("b", {"k": 1}, parent=UPSTREAM)
    assert first is second  # one shared no-op context manager
    with first as opened:
        assert opened is None
    assert telemetry.current_trace_dict() is None
    assert telemetry.server_span("GET /", None) is None
    messages = [OutboundMessage("t", b"x")]
    assert telemetry.inject_attributes(messages) is messages
    upstream = {"traceparent": UPSTREAM}
    assert telemetry.forward_trace(upstream) == upstream
    assert telemetry.traced("x")(lambda: 42)() == 42


def test_spans_nest_and_become_the_logged_and_sent_trace(traced: Path) -> None:
    with telemetry.span("outer", {"noetl.step": "start", "skipped": None}) as outer:
        assert outer is not None
        with telemetry.span("inner"):
            sent = telemetry.current_trace_dict()
            trace = current_trace.get()
            assert trace is not None and trace.own
            assert trace.outgoing() == sent  # the internal client sends this span as the parent, unchanged
    assert current_trace.get() is None
    spans = {s["name"]: s for s in flushed(traced)}
    assert spans["inner"]["parent_span_id"] == spans["outer"]["span_id"]
    assert spans["inner"]["trace_id"] == spans["outer"]["trace_id"]
    assert spans["outer"]["parent_span_id"] is None
    assert spans["outer"]["attributes"] == {"noetl.step": "start"}
    assert sent == {"traceparent": f"00-{spans['inner']['trace_id']}-{spans['inner']['span_id']}-01"}
    assert spans["outer"]["service"] == "noetl-test"


def test_a_span_continues_a_traceparent_from_a_message(traced: Path) -> None:
    with telemetry.remote_parent(UPSTREAM), telemetry.span("worker.command"):
        pass
    with telemetry.span("projector.apply", parent={"traceparent": UPSTREAM, "event_id": "1"}):
        pass
    with telemetry.span("bad parent", parent="00-zz-yy-01"):  # malformed: a new trace
        pass
    spans = {s["name"]: s for s in flushed(traced)}
    for name in ("worker.command", "projector.apply"):
        assert spans[name]["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
        assert spans[name]["parent_span_id"] == "b7ad6b7169203331"
    assert spans["bad parent"]["trace_id"] != "0af7651916cd43dd8448eb211c80319c"


def test_an_exception_is_recorded_on_its_span(traced: Path) -> None:
    with pytest.raises(ValueError), telemetry.span("failing"):
        raise ValueError("boom")
    (span,) = flushed(traced)
    assert span["status"] == "ERROR"
    assert span["events"][0]["name"] == "exception"


def test_sampling_keeps_the_callers_decision(tmp_path: Path) -> None:
    telemetry.configure(settings(tmp_path, tracing_sample_ratio=0.0), "test")
    with telemetry.span("new trace, not kept"):
        assert telemetry.current_trace_dict() is not None  # still propagated, flagged not sampled
    with telemetry.span("sampled by the caller", parent=UPSTREAM):
        pass
    with telemetry.span("unsampled by the caller", parent=UNSAMPLED):
        pass
    assert [s["name"] for s in flushed(tmp_path)] == ["sampled by the caller"]


def test_forward_and_pubsub_carry_the_current_span(traced: Path) -> None:
    message = OutboundMessage("t", b"x", {"execution_id": "1"})
    mine = OutboundMessage("t", b"x", {"traceparent": UPSTREAM})
    with telemetry.span("ingress.forward"):
        own = telemetry.current_trace_dict()
        assert own is not None
        forwarded = telemetry.forward_trace({"traceparent": UPSTREAM, "baggage": "k=v"})
        injected = telemetry.inject_attributes([message, mine])
    assert forwarded == {**own, "baggage": "k=v"}
    assert injected[0] == dataclasses.replace(message, attributes={"execution_id": "1", **own})
    assert injected[1] is mine  # a message that carries a context keeps it
    (span,) = flushed(traced)
    assert span["attributes"]["noetl.upstream.traceparent"] == UPSTREAM


def _app(role: str, folder: Path) -> Flask:
    app = create_app(role, settings(folder))

    @app.get("/api/thing/<int:n>")
    def thing(n: int) -> dict[str, Any]:
        return {"n": n, "trace": telemetry.current_trace_dict()}

    return app


def test_a_request_is_a_server_span_continuing_the_callers_trace(tmp_path: Path) -> None:
    answer = _app("execute", tmp_path).test_client().get("/api/thing/7", headers={"traceparent": UPSTREAM})
    assert answer.status_code == 200
    (span,) = flushed(tmp_path)
    assert span["name"] == "GET /api/thing/<int:n>"  # the route, never the raw path: bounded names
    assert span["kind"] == "SERVER"
    assert (span["trace_id"], span["parent_span_id"]) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert span["attributes"]["http.response.status_code"] == 200
    assert answer.json is not None and span["span_id"] in answer.json["trace"]["traceparent"]


def test_the_public_edge_starts_its_own_trace(tmp_path: Path) -> None:
    _app("ingress", tmp_path).test_client().get("/api/thing/7", headers={"traceparent": UPSTREAM})
    (span,) = flushed(tmp_path)
    assert span["trace_id"] != "0af7651916cd43dd8448eb211c80319c"
    assert span["parent_span_id"] is None


def test_pushed_roles_leave_the_span_to_their_handler(tmp_path: Path) -> None:
    _app("worker", tmp_path).test_client().get("/api/thing/7")
    assert flushed(tmp_path) == []


def test_counters_are_opentelemetry_counters(tmp_path: Path) -> None:
    import json

    telemetry.configure(settings(tmp_path, tracing="off"), "ingress")
    counters = Counters()
    counters.inc("ingress_received", listener="hooks")
    counters.inc("ingress_received", listener="hooks")
    telemetry.gauge("spool_bytes", 512, subscription="demo/s")
    assert counters.value("ingress_received", listener="hooks") == 2
    telemetry.shutdown()
    points = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    by_name = {p["name"]: p for p in points}
    assert by_name["noetl.ingress_received"]["value"] == 2
    assert by_name["noetl.ingress_received"]["attributes"] == {"listener": "hooks"}
    assert by_name["noetl.spool_bytes"]["value"] == 512
    assert by_name["noetl.ingress_received"]["service"] == "noetl-ingress"


def test_local_tracing_needs_a_folder() -> None:
    from noetl_cloud.errors import ConfigError

    with pytest.raises(ConfigError, match="NOETL_TELEMETRY_DIR"):
        telemetry.configure(Settings(tracing="local"), "test")
    telemetry.shutdown()


def test_the_trace_link_answers_the_local_spans_or_redirects_to_cloud_trace(traced: Path) -> None:
    with telemetry.span("one"):
        trace_id = (telemetry.current_trace_dict() or {})["traceparent"].split("-")[1]
    telemetry.shutdown()
    app = Flask("t")
    register_error_handlers(app)
    app.register_blueprint(traces.blueprint(settings(traced)))
    client = app.test_client()
    answer = client.get(f"/api/traces/{trace_id}")
    assert answer.status_code == 200 and answer.json is not None
    assert [s["name"] for s in answer.json["spans"]] == ["one"]
    assert client.get("/api/traces/not-a-trace").status_code == 400

    cloud = Flask("c")
    cloud.register_blueprint(traces.blueprint(Settings(tracing="cloud", project_id="acme-prod")))
    moved = cloud.test_client().get(f"/api/traces/{trace_id}")
    assert moved.status_code == 302
    assert moved.headers["Location"] == traces.CLOUD_TRACE_URL.format(trace_id=trace_id, project="acme-prod")

    off = Flask("o")
    register_error_handlers(off)
    off.register_blueprint(traces.blueprint(Settings()))
    assert off.test_client().get(f"/api/traces/{trace_id}").status_code == 404


def test_calls_made_under_a_remote_parent_name_it(traced: Path) -> None:
    with telemetry.remote_parent(UPSTREAM):
        trace = current_trace.get()
        assert trace is not None and trace.outgoing() == {"traceparent": UPSTREAM}
    assert current_trace.get() is None


def test_health_probes_make_no_spans(tmp_path: Path) -> None:
    _app("execute", tmp_path).test_client().get("/healthz")
    assert flushed(tmp_path) == []


def test_spool_writes_and_drains_are_spans_and_its_bytes_and_circuit_are_gauges(tmp_path: Path) -> None:
    import json

    from tests.unit.spool_support import SUB, world

    telemetry.configure(settings(tmp_path), "spool_drainer")
    w = world()
    target = w.target()
    for _ in range(2):  # two failed forwards open the circuit
        w.engine.report(target, w.engine.gate(target), ok=False)
    with telemetry.span("ingress.forward"):
        w.spool(target, 1)
        w.engine.usage(SUB, w.backend)
    w.clock.advance(1.0)
    assert w.drainer().drain(target).state == "drained"
    spans = flushed(tmp_path)  # also exports the metrics
    by_name = {s["name"]: s for s in spans}
    assert by_name["spool.write"]["parent_span_id"] == by_name["ingress.forward"]["span_id"]
    assert "spool.drain" in by_name
    points = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = {p["name"]: p for p in points}
    assert last["noetl.circuit_open"]["attributes"] == {"subscription": SUB}
    assert last["noetl.circuit_open"]["value"] == 0  # opened, then closed by the drain's probe
    assert last["noetl.spool_bytes"]["value"] == 0 and last["noetl.spool_items"]["value"] == 0  # drained
