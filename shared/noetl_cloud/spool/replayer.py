"""Replaying one spooled item (RFC §8.3): the request a replay sends and what its answer means.

:func:`replay_request` rebuilds the ``POST /api/execute`` body from the item's stored plan with a
dedup block, so a replay never reads the message's headers again and a second replay of one item
is a ``duplicate``; :class:`ApiReplayer` sends it through the control plane. The drainer
(:mod:`~noetl_cloud.spool.drain`) and the local drain loop (:mod:`~noetl_cloud.spool.local_mode`)
replay through a :class:`Replayer`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from noetl_cloud.envelope import format_time
from noetl_cloud.errors import NoetlError
from noetl_cloud.spool.item import SpoolItem

REPLAY_DEDUP_WINDOW_S: Final = 24 * 3600
UNAVAILABLE_STATUSES: Final = frozenset({429, 502, 503, 504})


# -- replay ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayResult:
    """``replayed`` (started, or a duplicate within the dedup window), ``unavailable`` (the
    downstream is down: the circuit counts it, the item does not) or ``rejected`` (the item
    failed: it counts an attempt)."""

    outcome: Literal["replayed", "unavailable", "rejected"]
    execution_id: str | None = None
    duplicate: bool = False
    detail: str | None = None


class Replayer(Protocol):
    def replay(self, item: SpoolItem, payload: bytes) -> ReplayResult:
        """Dispatch one spooled item again, from its stored plan."""
        ...


def replay_request(item: SpoolItem, payload: bytes) -> dict[str, Any]:
    """The ``POST /api/execute`` body of a replay: the stored request, the exact workload, a dedup block."""
    plan = item.plan
    request = dict(plan.get("request") or {})
    request.setdefault("path", plan.get("playbook"))
    if plan.get("execution_pool"):
        request.setdefault("execution_pool", plan["execution_pool"])
    if plan.get("trace") and plan["trace"].get("traceparent"):
        request.setdefault("trace", plan["trace"])
    request["workload"] = json.loads(payload)
    request["dedup"] = (
        request.get("dedup")
        or plan.get("dedup")
        or {
            "key": item.idempotency_key or item.message_id,
            "window_secs": REPLAY_DEDUP_WINDOW_S,
        }
    )
    meta = dict(request.get("meta") or {})
    meta["spool"] = {"recv_seq": str(item.recv_seq), "spooled_at": format_time(item.spooled_at), "lane": item.lane}
    if plan.get("probe"):  # this replay is a downstream circuit's probe: its execution reports under the holder
        meta["spool"]["probe"] = dict(plan["probe"])
    request["meta"] = meta
    return request


def with_probe(item: SpoolItem, probes: Mapping[str, str]) -> SpoolItem:
    """The item replayed as the probe of downstream circuits (``{name: holder}``, carried in ``meta.spool.probe``)."""
    return item.model_copy(update={"plan": {**item.plan, "probe": dict(probes)}})


class ApiReplayer:
    """Replays through the control plane (an ``ApiClient``)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def replay(self, item: SpoolItem, payload: bytes) -> ReplayResult:
        try:
            response = self.api.post("/api/execute", json=replay_request(item, payload))
        except NoetlError as exc:
            return ReplayResult("unavailable", detail=exc.code)
        body = response.json if isinstance(response.json, dict) else {}
        if response.status in UNAVAILABLE_STATUSES:
            return ReplayResult("unavailable", detail=f"http_{response.status}")
        if response.status >= 400:
            error = body.get("error")
            if not isinstance(error, dict):
                error = {}
            return ReplayResult("rejected", detail=str(error.get("code") or f"http_{response.status}"))
        return ReplayResult("replayed", body.get("execution_id"), duplicate=body.get("status") == "duplicate")
