"""Structured logs in the Cloud Logging JSON shape, W3C trace context, and component counters.

A log line is one JSON object on stderr: ``severity``, ``message``, ``time``, ``logger``,
``logging.googleapis.com/trace`` (when a trace is current and the project is known),
``logging.googleapis.com/spanId``, ``execution_id`` when one is current, and the ``extra``
fields the caller passed. The current trace and execution id live in context variables set
by the web layer per request (and by workers per command), so every line inside a request
carries them without being passed around.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context (traceparent + tracestate + baggage)."""

    trace_id: str
    span_id: str
    flags: str = "01"
    tracestate: str | None = None
    baggage: str | None = None
    #: The context of a span this process records (noetl_cloud.telemetry): sent downstream as it is,
    #: so the downstream span's parent exists; a context only passed through gets a child span id.
    own: bool = False

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @classmethod
    def parse(
        cls, traceparent: str | None, tracestate: str | None = None, baggage: str | None = None
    ) -> TraceContext | None:
        """Parse a ``traceparent`` header; a malformed one gives ``None`` (it is dropped)."""
        if not traceparent:
            return None
        match = _TRACEPARENT.match(traceparent.strip().lower())
        if match is None:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest):
            return None
        if trace_id == "0" * 32 or span_id == "0" * 16:
            return None
        return cls(trace_id, span_id, flags, tracestate or None, baggage or None)

    @classmethod
    def new(cls) -> TraceContext:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    def outgoing(self) -> dict[str, str]:
        """The headers (or attributes) a downstream call carries for this context."""
        return (self if self.own else self.child()).to_dict()

    def child(self) -> TraceContext:
        """The same trace with a new span id (what we send downstream)."""
        return TraceContext(self.trace_id, secrets.token_hex(8), self.flags, self.tracestate, self.baggage)

    def to_dict(self) -> dict[str, str]:
        out = {"traceparent": self.traceparent}
        if self.tracestate:
            out["tracestate"] = self.tracestate
        if self.baggage:
            out["baggage"] = self.baggage
        return out


current_trace: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar("noetl_trace", default=None)
current_execution_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("noetl_execution_id", default=None)
current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("noetl_request_id", default=None)


@contextmanager
def execution_scope(execution_id: str | None) -> Iterator[None]:
    """Tag every log line inside the block with ``execution_id``."""
    token = current_execution_id.set(execution_id)
    try:
        yield
    finally:
        current_execution_id.reset(token)


_SEVERITY = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class CloudLoggingFormatter(logging.Formatter):
    """Formats records as Cloud Logging structured JSON."""

    def __init__(self, project_id: str | None = None, role: str | None = None) -> None:
        super().__init__()
        self.project_id = project_id
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": _SEVERITY.get(record.levelno, "DEFAULT"),
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "logger": record.name,
        }
        if self.role:
            entry["role"] = self.role
        trace = current_trace.get()
        if trace is not None:
            if self.project_id:
                entry["logging.googleapis.com/trace"] = f"projects/{self.project_id}/traces/{trace.trace_id}"
            else:
                entry["trace_id"] = trace.trace_id
            entry["logging.googleapis.com/spanId"] = trace.span_id
        execution_id = current_execution_id.get()
        if execution_id is not None:
            entry["execution_id"] = execution_id
        request_id = current_request_id.get()
        if request_id is not None:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class Counters:
    """Monotonic counters with labels of one component: each increment goes to the OpenTelemetry
    counter ``noetl.<name>`` (:mod:`noetl_cloud.telemetry.metrics`: exported to Cloud Monitoring or
    the local exporter, nothing when metrics are off), and is kept here for the component's own
    status (:meth:`value`; the pull runtime's private ``/metrics`` renders :meth:`exposition`)."""

    def __init__(self, namespace: str = "noetl") -> None:
        from noetl_cloud.telemetry.metrics import record  # here, not at import: telemetry imports this module

        self.namespace = namespace
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()
        self._record = record

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount
        self._record(name, amount, **labels)

    def value(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def exposition(self) -> str:
        lines = []
        with self._lock:
            items = sorted(self._values.items())
        seen: set[str] = set()
        for (name, labels), value in items:
            metric = f"{self.namespace}_{name}_total"
            if metric not in seen:
                lines.append(f"# TYPE {metric} counter")
                seen.add(metric)
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{metric}{{{rendered}}} {value:g}" if rendered else f"{metric} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def configure_logging(level: str = "INFO", *, project_id: str | None = None, role: str | None = None) -> None:
    """Send the root logger's records to stderr as Cloud Logging JSON (idempotent)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if getattr(handler, "_noetl", False):
            handler.setFormatter(CloudLoggingFormatter(project_id, role))
            root.setLevel(level)
            return
    handler = logging.StreamHandler(sys.stderr)
    handler._noetl = True  # type: ignore[attr-defined]
    handler.setFormatter(CloudLoggingFormatter(project_id, role))
    root.addHandler(handler)
    root.setLevel(level)
