"""OpenTelemetry for every role: spans, the W3C context across HTTP and Pub/Sub, and metrics.

:func:`configure` is called once per process with the role's settings (``NOETL_TRACING``,
``NOETL_METRICS``). Off (the default), the tracer is never built and nothing of OpenTelemetry is
even imported: :func:`span` hands back one shared no-op context manager, so the hot path creates no
span object. On, spans go to the local exporter (JSON lines, :mod:`.localexport`) or to Cloud Trace
through a batch processor with a bounded queue (a full queue drops spans, it never blocks a request).

What code calls:

* :func:`span` -- a span as the current one, a child of the current span or of a ``traceparent``;
* :func:`traced` -- the same as a decorator;
* :func:`forward_trace` -- the trace a downstream execution carries (the ingress's forward);
* :func:`inject_attributes` -- the current span into Pub/Sub message attributes;
* :func:`record` / :func:`gauge` -- metrics (see :mod:`.metrics`);
* :func:`noetl_cloud.telemetry.tools.traced_tools` -- a span per tool call of the worker.
"""

from noetl_cloud.telemetry.metrics import gauge, record
from noetl_cloud.telemetry.setup import configure, shutdown
from noetl_cloud.telemetry.spans import (
    annotate,
    current_trace_dict,
    forward_trace,
    in_context,
    inject_attributes,
    remote_parent,
    server_span,
    span,
    traced,
    tracing,
)

__all__ = [
    "annotate",
    "configure",
    "current_trace_dict",
    "forward_trace",
    "gauge",
    "in_context",
    "inject_attributes",
    "record",
    "remote_parent",
    "server_span",
    "shutdown",
    "span",
    "traced",
    "tracing",
]
