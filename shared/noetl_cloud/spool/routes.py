"""The drainer's ``/api/spool/*``: the spool and its dead letters for operators (docs/spool.md#operators).

The console reaches them through the control plane, which forwards ``/api/spool/*`` here
(:mod:`noetl_cloud.control.spool_proxy`); ``noetl-cloud spool resend`` calls them directly.

* ``GET  /api/spool/subscriptions[?subscription=]`` -- lanes, counts, bytes, oldest age, dead letters, circuit;
* ``GET  /api/spool/dead-letters?subscription=&lane=&reason=&limit=&after=`` -- one page of dead letters;
* ``POST /api/spool/dead-letters/resend`` ``{"subscription", "name"}`` -- resend one, then drain;
* ``POST /api/spool/resends`` ``{"subscription", "lane"?, "reason"?}`` -- 202: resend all that match, one operation;
* ``GET  /api/spool/resends/<operation_id>`` -- that operation's progress;
* ``POST /api/spool/drain`` ``{"subscription"}`` -- drain one subscription now (the console's "drain now").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from flask import Flask, g, request
from pydantic import BaseModel, ValidationError

from noetl_cloud.errors import BadRequest
from noetl_cloud.spool.item import lane_prefix
from noetl_cloud.spool.manage import Filter, SpoolManager
from noetl_cloud.spool.models import DeadLettersQuery, DrainOne, ResendAll, ResendOne, SubscriptionsQuery
from noetl_cloud.web import json_body
from noetl_cloud.web.errors import validation_failed

PREFIX: Final = "/api/spool/"


def _caller() -> str | None:
    """Who asked (the authenticated principal: a service account email, or the token's purpose)."""
    caller = g.get("caller")
    return None if caller is None else str(caller.principal)


def _named(subscription: str | None, lane: str | None = None) -> None:
    """A subscription or lane the spool cannot name (too long once encoded) is the caller's error."""
    try:
        if subscription is not None:
            lane_prefix(subscription, lane or "-")
    except ValueError as exc:
        raise BadRequest(str(exc), code="invalid_spool_name") from None


def _query(model: type[BaseModel]) -> Any:
    try:
        return model.model_validate(request.args.to_dict())
    except ValidationError as exc:
        raise validation_failed(exc) from None


def register(app: Flask, built: Callable[[], SpoolManager]) -> None:
    """The routes, over the manager ``built`` returns (built on the first call: no connection before)."""

    def managed() -> SpoolManager:
        return built()

    @app.get("/api/spool/subscriptions")
    def spool_subscriptions() -> dict[str, Any]:
        query: SubscriptionsQuery = _query(SubscriptionsQuery)
        _named(query.subscription)
        return {"items": managed().overview(query.subscription)}

    @app.get("/api/spool/dead-letters")
    def spool_dead_letters() -> dict[str, Any]:
        query: DeadLettersQuery = _query(DeadLettersQuery)
        _named(query.subscription, query.lane)
        which = Filter(query.subscription, query.lane, query.reason)
        return managed().dead_letters(which, limit=query.limit, after=query.after)

    @app.post("/api/spool/dead-letters/resend")
    def spool_resend() -> dict[str, Any]:
        body = json_body(ResendOne)
        _named(body.subscription)
        return managed().resend(body.subscription, body.name, by=_caller())

    @app.post("/api/spool/resends")
    def spool_resend_all() -> tuple[dict[str, Any], int]:
        body = json_body(ResendAll)
        _named(body.subscription, body.lane)
        return managed().start_resend_all(Filter(body.subscription, body.lane, body.reason), by=_caller()), 202

    @app.get("/api/spool/resends/<operation_id>")
    def spool_resend_operation(operation_id: str) -> dict[str, Any]:
        return managed().operation(operation_id)

    @app.post("/api/spool/drain")
    def spool_drain_now() -> dict[str, Any]:
        body = json_body(DrainOne)
        _named(body.subscription)
        return {"results": managed().drain(body.subscription)}
