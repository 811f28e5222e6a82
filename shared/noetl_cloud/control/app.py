"""The ``execute`` role's HTTP API: catalog, executions, subscriptions, listener configuration.

Handlers decode the request, call one service, and shape the answer; errors are the services'
typed exceptions, turned into the JSON error model by the app factory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, g, jsonify, request
from sqlalchemy.exc import DBAPIError

from noetl_cloud import console, telemetry
from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.control import (
    bulk_reruns,
    executions_api,
    ingress_scope,
    payload_previews,
    runtime_events,
    spool_events,
    spool_proxy,
)
from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.models import Audit, BatchRequest, Cancel, ExecuteRequest, RegisterSubscription, Transition
from noetl_cloud.control.reports import WorkerRef, WorkerReport
from noetl_cloud.errors import BadRequest
from noetl_cloud.observability import configure_logging
from noetl_cloud.payload.bootstrap import payload_store
from noetl_cloud.replay import api as replay_api
from noetl_cloud.settings import Settings
from noetl_cloud.telemetry import traces
from noetl_cloud.web import create_app, json_body
from noetl_cloud.web.app import MAX_FORWARD_BYTES, body_limit
from noetl_cloud.web.errors import error_response

log = logging.getLogger(__name__)


def _catalog_content() -> str:
    """The YAML document of ``POST /api/catalog``: the raw body, or ``{"content": ...}`` as JSON."""
    if request.mimetype == "application/json":
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise BadRequest('a JSON body must be {"content": "<YAML document>"}', code="invalid_json")
        return str(body["content"])
    raw = request.get_data(cache=False)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the document must be UTF-8 text", code="invalid_encoding") from None


def build_app(plane: ControlPlane, auth: InternalAuth) -> Flask:
    settings = plane.settings
    app = create_app("execute", settings)
    install(app, auth)
    install(app, auth, prefix="/console/")  # the operators' console (docs/console.md): the same callers

    @app.errorhandler(DBAPIError)
    def _database_error(exc: DBAPIError) -> tuple[Response, int]:
        # SQLSTATE class 22 (data exception: a NUL character, a number out of range) is a value from the
        # caller that PostgreSQL refuses: a 400, and neither the value nor the statement is echoed.
        if _sqlstate(exc).startswith("22"):
            return error_response(400, "invalid_value", "a value in the request cannot be stored (NUL or out of range)")
        if exc.connection_invalidated:  # the server went away under a pooled connection: retryable
            log.warning("database connection lost", exc_info=exc)
            return error_response(503, "database_unavailable", "the database connection was lost; retry")
        log.error("database error", exc_info=exc)
        return error_response(500, "internal_error", "internal error")

    # -- catalog --------------------------------------------------------------------------------

    @app.post("/api/catalog")
    def register_catalog() -> tuple[dict[str, Any], int]:
        entry, created = plane.catalog.register(_catalog_content())
        return {**entry.summary(), "created": created}, 201 if created else 200

    @app.get("/api/catalog")
    def list_catalog() -> dict[str, Any]:
        kind = request.args.get("kind")
        if kind not in (None, "Playbook", "Subscription"):
            raise BadRequest("kind must be Playbook or Subscription", code="invalid_kind")
        return {"items": [e.summary() for e in plane.catalog.list(kind)]}

    @app.get("/api/catalog/<path:path>")
    def get_catalog(path: str) -> dict[str, Any]:
        version = request.args.get("version")
        if version is not None and not (version.isascii() and version.isdigit()):
            raise BadRequest("version must be a positive integer", code="invalid_version")
        return plane.catalog.get(path, int(version) if version else None).to_dict()

    # -- executions -----------------------------------------------------------------------------

    @app.post("/api/execute")
    @body_limit(MAX_FORWARD_BYTES)  # what the ingress accepts (a listener's body up to 32 MiB), it forwards
    def execute() -> tuple[dict[str, Any], int]:
        body = json_body(ExecuteRequest)
        if ingress_scope.scoped(g.caller.roles):  # the ingress starts its listeners' playbooks only
            plane.ingress_scope.check(body)
        result = plane.executions.start_one(body)
        telemetry.annotate(**{"noetl.execution_id": result.execution_id, "noetl.status": result.status})
        return {
            "execution_id": result.execution_id,
            "status": result.status,
            "execution_pool": result.execution_pool,
        }, 202

    @app.post("/api/execute/batch")
    @body_limit(MAX_FORWARD_BYTES)
    def execute_batch() -> dict[str, Any]:
        results = plane.executions.start_batch(json_body(BatchRequest).executions)
        return {
            "count": len(results),
            "started": sum(r.status == "started" for r in results),
            "duplicates": sum(r.status == "duplicate" for r in results),
            "failed": sum(r.status == "error" for r in results),
            "results": [r.public() for r in results],
        }

    @app.post("/api/executions/<int:execution_id>/cancel")
    def cancel_execution(execution_id: int) -> dict[str, Any]:
        body = json_body(Cancel) if request.content_length else Cancel()
        return plane.executions.cancel(execution_id, body.reason)

    # -- distributed execution (docs/distributed.md) ---------------------------------------------

    @app.get("/api/commands/<int:command_id>")
    def get_command(command_id: int) -> dict[str, Any]:
        return plane.orchestrator.get(command_id)

    @app.post("/api/commands/<int:command_id>/claim")
    def claim_command(command_id: int) -> dict[str, Any]:
        return plane.orchestrator.claim(command_id, json_body(WorkerRef).worker_id)

    @app.post("/api/commands/<int:command_id>/heartbeat")
    def heartbeat_command(command_id: int) -> dict[str, Any]:
        return plane.orchestrator.heartbeat(command_id, json_body(WorkerRef).worker_id)

    @app.post("/api/events")
    def report_events() -> dict[str, Any]:
        return plane.orchestrator.report(json_body(WorkerReport))

    # -- subscriptions --------------------------------------------------------------------------

    @app.post("/api/subscriptions/register")
    def register_subscription() -> tuple[dict[str, Any], int]:
        view, created = plane.subscriptions.register(json_body(RegisterSubscription).path)
        return {**view, "created": created}, 201 if created else 200

    @app.post("/api/subscriptions/<int:subscription_id>/<action>")
    def transition(subscription_id: int, action: str) -> dict[str, Any]:
        body = json_body(Transition) if request.content_length else Transition()
        return plane.subscriptions.transition(subscription_id, action, body.expected_version)

    @app.get("/api/subscriptions")
    def list_subscriptions() -> dict[str, Any]:
        return {"items": plane.subscriptions.list(request.args.get("state"))}

    @app.get("/api/subscriptions/<int:subscription_id>")
    def get_subscription(subscription_id: int) -> dict[str, Any]:
        return plane.subscriptions.get(subscription_id)

    # -- internal -------------------------------------------------------------------------------

    @app.get("/api/internal/ingress/<listener:listener>")
    def listener_config(listener: str) -> Response:  # the ingress role's alone (auth.roles.POLICY)
        response = jsonify(plane.listeners.config(listener))
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.post("/api/internal/ingress/<listener:listener>/audit")
    def listener_audit(listener: str) -> tuple[dict[str, Any], int]:
        body = json_body(Audit)
        event_id = plane.listeners.audit(listener, body.event_type, body.payload.model_dump(exclude_none=True))
        return {"event_id": event_id}, 201

    @app.post("/api/internal/reaper")
    def reaper() -> dict[str, Any]:
        """Re-issue commands whose claim lease expired (Cloud Scheduler, every minute)."""
        return plane.orchestrator.reap()

    @app.post("/api/internal/retention")
    def retention() -> dict[str, Any]:
        """Partitions ahead, expired executions archived and removed, old partitions dropped (Cloud
        Scheduler, daily; docs/retention.md)."""
        return plane.retention.sweep()

    @app.post("/api/internal/subscriptions/tick")
    def subscription_tick() -> dict[str, Any]:
        """Run the due slot of every active scheduled subscription once (Cloud Scheduler, every minute;
        the local scheduler every few seconds; docs/runtime.md, Scheduled subscriptions)."""
        return plane.scheduled.tick()

    @app.get("/api/internal/subscriptions/schedule")
    def subscription_schedule() -> dict[str, Any]:
        """Each scheduled subscription: cadence, state, next slot, last run; those that cannot run, why."""
        return plane.scheduled.report()

    @app.get("/api/internal/outbox/relay")
    def outbox_relay() -> dict[str, Any]:
        """This instance's outbox relay: rows handed off, published and left to the sweep, and the delay
        from a request's commit to the end of its publish (``lag_ms_last``, ``lag_ms_max``)."""
        return plane.relay.report()

    @app.post("/api/internal/outbox/sweep")
    def sweep() -> dict[str, Any]:
        """Publish command notifications a failed or crashed writer left (Cloud Scheduler)."""
        published = plane.relay.sweep(topic_prefix=settings.command_topic_prefix)
        return {**published, "dedup_reclaimed": plane.executions.reclaim_dedup()}

    app.register_blueprint(spool_events.blueprint(lambda: spool_events.SpoolEventService(plane.store, plane.events)))
    app.register_blueprint(
        runtime_events.blueprint(
            lambda: runtime_events.RuntimeEventService(plane.subscriptions, plane.store, plane.events)
        )
    )
    app.register_blueprint(replay_api.blueprint(lambda: plane.replay))
    app.register_blueprint(executions_api.blueprint(lambda: plane.execution_queries, lambda: plane.executions))
    reruns_service: list[bulk_reruns.BulkReruns] = []  # built on first use, one per app

    def reruns_of_plane() -> bulk_reruns.BulkReruns:
        if not reruns_service:
            reruns_service.append(bulk_reruns.BulkReruns(plane.engine, plane.execution_queries, plane.executions))
        return reruns_service[0]

    app.register_blueprint(bulk_reruns.blueprint(reruns_of_plane))
    previews: list[payload_previews.PayloadPreviews] = []

    def previews_of_plane() -> payload_previews.PayloadPreviews:
        if not previews:
            store = payload_store(settings)
            previews.append(payload_previews.PayloadPreviews(plane.engine, plane.execution_queries.tenant, store))
        return previews[0]

    app.register_blueprint(payload_previews.blueprint(previews_of_plane))
    app.register_blueprint(console.blueprint())
    app.register_blueprint(spool_proxy.blueprint(settings))  # the console's spool page: the drainer's routes
    app.register_blueprint(traces.blueprint(plane.settings))  # where the console's trace link goes
    return app


def _sqlstate(exc: DBAPIError) -> str:
    """The SQLSTATE pg8000 reports (its errors carry the server's fields as a dict), or ``""``."""
    fields = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    return str(fields.get("C", "")) if isinstance(fields, dict) else ""


def app_from_env(env: Mapping[str, str]) -> Flask:
    """The execute role, configured from the process environment (the entry point's one call)."""
    settings = Settings.from_env(env, role="execute")
    configure_logging(settings.log_level, project_id=settings.project_id, role="execute")
    auth = InternalAuth.from_settings(settings, audience=settings.internal_api_audience)
    return build_app(ControlPlane(settings, env=env), auth)
