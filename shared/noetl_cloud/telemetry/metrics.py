"""Metrics through OpenTelemetry: counters and gauges by name, created on first use.

The names the RFC asks for (§8.4, §9): ``noetl.runtime_received`` (messages fetched by a pull
runtime), ``noetl.spool_bytes`` and ``noetl.spool_items`` per subscription, ``noetl.circuit_open``
per subscription (1 open or half-open, 0 closed); plus the ingress's and the runtime's delivery
counters (:class:`noetl_cloud.observability.Counters`). Labels are bounded by construction: a
listener or subscription name the control plane registered, a reason code, a status; never a value
taken from a request. Off (``NOETL_METRICS=off``), each call returns at once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

PREFIX = "noetl."

_meter: Meter | None = None
_instruments: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def set_meter(meter: Meter | None) -> None:
    global _meter
    with _lock:
        _meter = meter
        _instruments.clear()


def metering() -> bool:
    return _meter is not None


def record(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add ``amount`` to the counter ``noetl.<name>``."""
    if _meter is None:
        return
    _instrument("counter", name).add(amount, labels)


def gauge(name: str, value: float, **labels: str) -> None:
    """Set the gauge ``noetl.<name>`` to ``value`` (the last value set is exported)."""
    if _meter is None:
        return
    _instrument("gauge", name).set(value, labels)


def _instrument(kind: str, name: str) -> Any:
    key = (kind, name)
    found = _instruments.get(key)
    if found is not None:
        return found
    with _lock:
        meter = _meter
        assert meter is not None
        found = _instruments.get(key)
        if found is None:
            found = meter.create_counter(PREFIX + name) if kind == "counter" else meter.create_gauge(PREFIX + name)
            _instruments[key] = found
        return found
