"""The control plane over HTTPS: the runtime's :class:`~noetl_cloud.runtime.port.ControlClient`.

The runtime holds no database connection (RFC §5, data-access boundary): it reads its spec from
the catalog, moves its subscription through the lifecycle API, and starts executions with
``POST /api/execute/batch`` (or ``POST /api/execute``). An answer the control plane gives for an
item (``started``, ``duplicate``, an item error) is final; a call that could not be made or was
answered 5xx, 401/403 (a credential problem heals with a redeploy, not by dropping messages) or
404 (a control plane without the route) is ``unavailable``, so the message is never lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from noetl_cloud.errors import NoetlError, NotFound, ValidationFailed
from noetl_cloud.runtime.port import ItemOutcome, RuntimeEvent
from noetl_cloud.web.client import ApiClient, ApiResponse, segment

log = logging.getLogger(__name__)

#: Answers to a whole call that say the request itself can never succeed.
PERMANENT = frozenset({400, 409, 413, 422})


class ApiControlClient:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._events_missing = False

    # -- catalog and lifecycle ---------------------------------------------------------------

    def load(self, path: str) -> dict[str, Any]:
        response = self.api.get(f"/api/catalog/{quote(path, safe='/')}").raise_for_error()
        document = response.json.get("document") if isinstance(response.json, dict) else None
        if not isinstance(document, dict) or document.get("kind") != "Subscription":
            raise ValidationFailed(f"{path} is not a Subscription", code="not_a_subscription")
        return document

    def register(self, path: str) -> dict[str, Any]:
        response = self.api.post("/api/subscriptions/register", json={"path": path}).raise_for_error()
        return dict(response.json)

    def transition(self, subscription_id: str, action: str) -> dict[str, Any]:
        response = self.api.post(f"/api/subscriptions/{segment(subscription_id)}/{segment(action)}").raise_for_error()
        return dict(response.json)

    def state(self, subscription_id: str) -> dict[str, Any]:
        return dict(self.api.get(f"/api/subscriptions/{segment(subscription_id)}").raise_for_error().json)

    # -- dispatch ----------------------------------------------------------------------------

    def dispatch(self, requests: Sequence[dict[str, Any]], *, batch: bool) -> list[ItemOutcome]:
        if batch:
            return self._batch(requests)
        return [self._one(request) for request in requests]

    def _batch(self, requests: Sequence[dict[str, Any]]) -> list[ItemOutcome]:
        try:
            response = self.api.post("/api/execute/batch", json={"executions": list(requests)})
        except NoetlError as exc:
            return [ItemOutcome("unavailable", error=exc.to_dict())] * len(requests)
        whole = _whole_call(response)
        if whole is not None:
            return [whole] * len(requests)
        results = response.json.get("results") if isinstance(response.json, dict) else None
        if not isinstance(results, list) or len(results) != len(requests):
            log.error("the batch answer does not match the request", extra={"status": response.status})
            return [ItemOutcome("unavailable", error={"code": "bad_batch_answer"})] * len(requests)
        outcomes = []
        for item in sorted(results, key=lambda r: int(r.get("index", 0))):
            status = item.get("status")
            if status == "started":
                outcomes.append(ItemOutcome("accepted", item.get("execution_id")))
            elif status == "duplicate":
                outcomes.append(ItemOutcome("duplicate", item.get("execution_id")))
            else:
                outcomes.append(ItemOutcome("rejected", error=item.get("error") or {"code": "item_error"}))
        return outcomes

    def _one(self, request: dict[str, Any]) -> ItemOutcome:
        try:
            response = self.api.post("/api/execute", json=request)
        except NoetlError as exc:
            return ItemOutcome("unavailable", error=exc.to_dict())
        whole = _whole_call(response)
        if whole is not None:
            return whole
        body = response.json if isinstance(response.json, dict) else {}
        if body.get("status") == "duplicate":
            return ItemOutcome("duplicate", body.get("execution_id"))
        return ItemOutcome("accepted", body.get("execution_id"))

    # -- events ------------------------------------------------------------------------------

    def record(self, subscription_id: str, events: Sequence[RuntimeEvent]) -> None:
        """``POST /api/internal/subscriptions/{id}/events``; best effort: an event the control
        plane cannot take is logged, never turned into a failed delivery."""
        body = {
            "events": [
                {
                    "event_type": e.event_type,
                    "payload": e.payload,
                    "idempotency_key": e.idempotency_key,
                    "event_time": e.event_time,
                }
                for e in events
            ]
        }
        try:
            response = self.api.post(f"/api/internal/subscriptions/{segment(subscription_id)}/events", json=body)
            response.raise_for_error()
        except NotFound as exc:
            # ``subscription_not_found``: no registration (yet) to write to; any other 404 is a
            # control plane older than the route. Either way the events are only logged.
            if exc.code != "subscription_not_found" and not self._events_missing:
                log.warning("the control plane does not take runtime events; they are only logged")
                self._events_missing = True
            for event in events:
                log.info(
                    "runtime event not recorded",
                    extra={"event_type": event.event_type, "payload": event.payload, "code": exc.code},
                )
        except NoetlError as exc:
            log.warning(
                "runtime events not recorded", extra={"code": exc.code, "types": [e.event_type for e in events]}
            )


def _whole_call(response: ApiResponse) -> ItemOutcome | None:
    """The outcome of every item when the call as a whole failed; ``None`` when it succeeded."""
    if response.status < 400:
        return None
    error = response.json.get("error") if isinstance(response.json, dict) else None
    error = error if isinstance(error, dict) else {"code": f"http_{response.status}"}
    if response.status in PERMANENT or (response.status == 404 and error.get("code") == "playbook_not_found"):
        return ItemOutcome("rejected", error=error)
    return ItemOutcome("unavailable", error=error)
