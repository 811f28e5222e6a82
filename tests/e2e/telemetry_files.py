"""What the local exporters wrote (noetl_cloud.telemetry.localexport): the spans of one trace, and a
counter's total over the processes that export it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noetl_cloud.telemetry.localexport import METRICS, read_spans


def metrics_env(folder: Path) -> dict[str, str]:
    """A role's environment for metrics to the local exporter under ``folder``, every second."""
    return {"NOETL_METRICS": "local", "NOETL_METRICS_EXPORT_S": "1", "NOETL_TELEMETRY_DIR": str(folder)}


def metric_points(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / METRICS
    if not path.exists():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            point = json.loads(line)
        except ValueError:  # a line being written
            continue
        if point.get("name") == name:
            points.append(point)
    return points


def metric_total(folder: Path, name: str, **labels: str) -> float:
    """The sum over processes of the last exported value of the counter ``name`` with ``labels``
    (each process exports its cumulative count)."""
    last: dict[tuple[Any, str], float] = {}
    for point in metric_points(folder, name):
        attributes = point.get("attributes") or {}
        if all(attributes.get(k) == v for k, v in labels.items()):
            last[(point.get("instance"), json.dumps(attributes, sort_keys=True))] = float(point["value"])
    return sum(last.values())


def trace_spans(folder: Path, trace_id: str) -> list[dict[str, Any]]:
    return list(read_spans(folder, trace_id))
