"""``GET /api/traces/<trace_id>``: where an execution's trace can be seen (the console links to it).

With ``NOETL_TRACING=cloud`` it redirects to the trace in the Cloud Trace explorer of
``NOETL_PROJECT_ID``; with ``local`` it answers the trace's spans from the local exporter's files,
oldest first, at most :data:`MAX_SPANS`; with ``off`` it is ``404 tracing_off``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from flask import Blueprint, Response, redirect

from noetl_cloud.errors import BadRequest, NotFound
from noetl_cloud.settings import Settings

MAX_SPANS = 2000
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
CLOUD_TRACE_URL = "https://console.cloud.google.com/traces/explorer;traceId={trace_id}?project={project}"


class TracingOff(NotFound):
    code = "tracing_off"


def trace_url(settings: Settings, trace_id: str) -> str | None:
    """The Cloud Trace explorer's page of ``trace_id`` (``None`` unless spans go to Cloud Trace)."""
    if settings.tracing != "cloud" or not settings.project_id:
        return None
    return CLOUD_TRACE_URL.format(trace_id=trace_id, project=quote(settings.project_id, safe=""))


def local_trace(folder: Path, trace_id: str) -> list[dict[str, Any]]:
    from noetl_cloud.telemetry.localexport import read_spans

    found: list[dict[str, Any]] = []
    for record in read_spans(folder, trace_id):
        found.append(record)
        if len(found) >= MAX_SPANS:
            break
    return sorted(found, key=lambda r: r.get("start_ns") or 0)


def blueprint(settings: Settings) -> Blueprint:
    bp = Blueprint("traces", __name__)

    @bp.get("/api/traces/<trace_id>")
    def get_trace(trace_id: str) -> Response | dict[str, Any]:
        if not _TRACE_ID.match(trace_id):
            raise BadRequest("a trace id is 32 lower-case hex digits", code="invalid_trace_id")
        url = trace_url(settings, trace_id)
        if url is not None:
            return redirect(url, code=302)  # type: ignore[return-value]
        if settings.tracing != "local" or not settings.telemetry_dir:
            raise TracingOff("tracing is off on this deployment (NOETL_TRACING)")
        spans = local_trace(Path(settings.telemetry_dir), trace_id)
        return {"trace_id": trace_id, "count": len(spans), "spans": spans}

    return bp
