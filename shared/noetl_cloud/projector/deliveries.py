"""What one push to the projector asks it to fold: one event id, or a bundle of them.

A message of the events topic is either one outbox row's ``{"event_id", "execution_id", "events"}``
(the sweep's, and a settle's lone row) or a settle's bundle ``{"deliveries": [...]}`` of such
entries, each with its own ``trace`` (``noetl_cloud.eventlog.bundles``). A bundle's executions are
folded side by side on the role's fold threads, and the push is answered once every fold has
committed, so Pub/Sub acknowledges nothing not yet folded; a failed fold fails the push, and its
redelivery folds again only what is still behind (the rest answer ``duplicate`` at their first read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from noetl_cloud import telemetry
from noetl_cloud.errors import BadRequest
from noetl_cloud.ids import id_from_text
from noetl_cloud.projector.service import Applied

MAX_DELIVERIES = 1000  # entries of one bundle; the relay sends at most 100


class InvalidNotification(BadRequest):
    """The message names no event id it could fold: it can never succeed (dead-lettered)."""

    code = "invalid_notification"


@dataclass(frozen=True)
class Delivery:
    event_id: int
    trace: Mapping[str, str] = field(default_factory=dict)


def deliveries_of(data: Any, attributes: Mapping[str, str]) -> list[Delivery]:
    """The deliveries a message carries: a bundle's entries, else its one event id (in the data, or
    the ``event_id`` attribute). Raises :class:`InvalidNotification` for anything else."""
    if isinstance(data, dict) and "deliveries" in data:
        entries = data["deliveries"]
        if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_DELIVERIES:
            raise InvalidNotification(f"a bundle carries 1 to {MAX_DELIVERIES} deliveries")
        return [Delivery(_event_id(entry), _trace(entry)) for entry in entries]
    value = data.get("event_id") if isinstance(data, dict) else attributes.get("event_id")
    return [Delivery(_event_id({"event_id": value}), attributes)]


def fold_each(deliveries: list[Delivery], handle: Callable[[int], Applied], folds: Executor) -> dict[str, Any]:
    """Fold every delivery (side by side on ``folds`` when there are several); the push's answer."""

    def one(delivery: Delivery) -> Applied:
        with telemetry.span("projector.apply", {"noetl.event_id": delivery.event_id}, parent=delivery.trace):
            return handle(delivery.event_id)

    if len(deliveries) == 1:
        return one(deliveries[0]).body()
    results = [r.body() for r in folds.map(one, deliveries)]
    return {"deliveries": len(results), "results": results}


def _event_id(entry: Any) -> int:
    event_id = id_from_text(entry.get("event_id")) if isinstance(entry, dict) else None
    if event_id is None:  # absent, not a number, or past a bigint: it can never be folded
        raise InvalidNotification("the message carries no event_id")
    return event_id


def _trace(entry: dict[str, Any]) -> Mapping[str, str]:
    trace = entry.get("trace")
    if not isinstance(trace, dict):
        return {}
    return {k: v for k, v in trace.items() if isinstance(k, str) and isinstance(v, str)}
