"""The local exporters: spans and metric points as JSON lines under ``NOETL_TELEMETRY_DIR``.

Every process of the local stack appends to the same two files (``spans.jsonl``, ``metrics.jsonl``),
one ``write`` per export on a file opened with ``O_APPEND``, so lines of two processes never mix. A
file past :data:`MAX_BYTES` is moved to ``<name>.1`` (the one before is dropped): bounded on disk.
``noetl-cloud traces show <trace id>`` and the tests read them (:func:`read_spans`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

MAX_BYTES = 64 * 1024 * 1024
SPANS = "spans.jsonl"
METRICS = "metrics.jsonl"


def _append(path: Path, lines: list[str]) -> None:
    if not lines:
        return
    data = ("\n".join(lines) + "\n").encode()
    try:
        if path.stat().st_size + len(data) > MAX_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def span_record(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "kind": span.kind.name,
        "service": span.resource.attributes.get("service.name"),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


class JsonLinesSpanExporter(SpanExporter):
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / SPANS

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            _append(self.path, [json.dumps(span_record(s), default=str) for s in spans])
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class JsonLinesMetricExporter(MetricExporter):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / METRICS

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        lines = []
        for resource in metrics_data.resource_metrics:
            service = resource.resource.attributes.get("service.name")
            instance = resource.resource.attributes.get("service.instance.id")
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        record = {"service": service, "instance": instance, "name": metric.name}
                        record["attributes"] = dict(point.attributes or {})
                        lines.append(json.dumps({**record, "value": value, "time_ns": point.time_unix_nano}))
        try:
            _append(self.path, lines)
        except OSError:
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


def read_spans(folder: Path, trace_id: str | None = None) -> Iterator[dict[str, Any]]:
    """The spans the local exporter wrote (the rotated file first), of one trace when ``trace_id``."""
    for name in (SPANS + ".1", SPANS):
        path = folder / name
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:  # a line being written
                    continue
                if trace_id is None or record.get("trace_id") == trace_id:
                    yield record
