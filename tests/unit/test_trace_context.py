from __future__ import annotations

import pytest

from noetl_cloud.observability import TraceContext


def test_valid_traceparent_parses_and_renders_back() -> None:
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    trace = TraceContext.parse(tp, "vendor=x", "user=1")
    assert trace is not None and trace.traceparent == tp
    assert trace.to_dict() == {"traceparent": tp, "tracestate": "vendor=x", "baggage": "user=1"}
    child = trace.child()
    assert child.trace_id == trace.trace_id and child.span_id != trace.span_id


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has no extra fields
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    ],
)
def test_malformed_traceparent_is_dropped(value: str | None) -> None:
    assert TraceContext.parse(value) is None


def test_future_versions_may_carry_extra_fields() -> None:
    assert TraceContext.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future") is not None


def test_new_trace_is_valid() -> None:
    trace = TraceContext.new()
    assert TraceContext.parse(trace.traceparent) == TraceContext(trace.trace_id, trace.span_id)
