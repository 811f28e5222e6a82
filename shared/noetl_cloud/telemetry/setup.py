"""Building the tracer and the meter of a process from its settings (once, at start).

``NOETL_TRACING=local`` / ``NOETL_METRICS=local``: the JSON lines exporters of :mod:`.localexport`
under ``NOETL_TELEMETRY_DIR``. ``cloud``: Cloud Trace (``opentelemetry-exporter-gcp-trace``; the
service account needs ``roles/cloudtrace.agent``) and Cloud Monitoring
(``opentelemetry-exporter-gcp-monitoring``; ``roles/monitoring.metricWriter``). Spans leave through
a batch processor whose queue is bounded (:data:`MAX_QUEUE`): when the exporter falls behind, spans
are dropped, never a request slowed. Sampling: a new trace is kept with ``NOETL_TRACING_SAMPLE_RATIO``;
a span whose parent came from a caller follows the caller's sampled flag.
"""

from __future__ import annotations

import atexit
import os
import socket
from pathlib import Path
from typing import Any

from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings
from noetl_cloud.telemetry import metrics, spans

MAX_QUEUE = 2048
_providers: list[Any] = []
_configured: tuple[Any, ...] | None = None


def configure(settings: Settings, role: str) -> None:
    """Set this process's tracer and meter from ``settings`` (the web layer calls it for each app it
    builds: the same settings again change nothing, others replace the exporters)."""
    global _configured
    key = (
        role,
        settings.tracing,
        settings.tracing_sample_ratio,
        settings.metrics,
        settings.metrics_export_s,
        settings.telemetry_dir,
        settings.project_id,
        settings.tenant_id,
    )
    off = settings.tracing == "off" and settings.metrics == "off"
    if key == _configured or (off and not _providers):
        _configured = key
        return
    shutdown()
    _configured = key
    if off:
        return
    from opentelemetry.sdk.resources import Resource

    attributes = {
        "service.name": f"noetl-{role}",
        "service.namespace": "noetl",
        "service.instance.id": f"{socket.gethostname()}-{os.getpid()}",
        "noetl.tenant": settings.tenant_id,
    }
    if settings.project_id:
        attributes["gcp.project_id"] = settings.project_id
    resource = Resource.create(attributes)
    if settings.tracing != "off":
        spans.set_tracer(_tracer(settings, resource))
    if settings.metrics != "off":
        metrics.set_meter(_meter(settings, resource))
    if not _registered:
        atexit.register(shutdown)
        _registered.append(True)


_registered: list[bool] = []


def shutdown() -> None:
    """Flush and stop the exporters (at exit, or before :func:`configure` builds new ones)."""
    global _configured
    _configured = None
    spans.set_tracer(None)
    metrics.set_meter(None)
    while _providers:
        _providers.pop().shutdown()


def _folder(settings: Settings) -> Path:
    if not settings.telemetry_dir:
        raise ConfigError(
            "NOETL_TELEMETRY_DIR is required when NOETL_TRACING or NOETL_METRICS is local",
            code="config_missing",
            details={"variables": ["NOETL_TELEMETRY_DIR"]},
        )
    return Path(settings.telemetry_dir)


def _tracer(settings: Settings, resource: Any) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter: SpanExporter
    if settings.tracing == "local":
        from noetl_cloud.telemetry.localexport import JsonLinesSpanExporter

        exporter = JsonLinesSpanExporter(_folder(settings))
        delay_ms = 500  # a local developer (and the e2e test) sees a trace within a second
    else:
        from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter

        exporter = CloudTraceSpanExporter(project_id=settings.project_id)  # type: ignore[no-untyped-call]
        delay_ms = 5000
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.tracing_sample_ratio)), shutdown_on_exit=False
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter, max_queue_size=MAX_QUEUE, schedule_delay_millis=delay_ms, max_export_batch_size=512
        )
    )
    _providers.append(provider)
    return provider.get_tracer("noetl_cloud")


def _meter(settings: Settings, resource: Any) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

    exporter: MetricExporter
    if settings.metrics == "local":
        from noetl_cloud.telemetry.localexport import JsonLinesMetricExporter

        exporter = JsonLinesMetricExporter(_folder(settings))
    else:
        from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter

        # One time series per instance: Cloud Run instances of a role would otherwise overwrite each other.
        exporter = CloudMonitoringMetricsExporter(project_id=settings.project_id, add_unique_identifier=True)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=settings.metrics_export_s * 1000)
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    _providers.append(provider)
    return provider.get_meter("noetl_cloud")
