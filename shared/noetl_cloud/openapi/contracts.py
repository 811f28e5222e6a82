"""The registry of every role's operations: the pydantic models a route validates its body with, its query
parameters, what it answers. :mod:`noetl_cloud.openapi.generator` walks each app's URL map against it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from noetl_cloud.control import payload_previews as previews
from noetl_cloud.control.event_models import RuntimeEventsIn, SpoolEventsIn
from noetl_cloud.control.execution_queries import MAX_WAIT_S
from noetl_cloud.control.models import (
    MAX_MAX,
    Audit,
    BatchRequest,
    BulkRerun,
    Cancel,
    ExecuteRequest,
    RegisterSubscription,
    Transition,
)
from noetl_cloud.control.reports import WorkerRef, WorkerReport
from noetl_cloud.frames.models import BatchCommitRequest, ClaimRequest, CommitRequest, HeartbeatRequest
from noetl_cloud.openapi.generator import Operation, Query, RoleContract
from noetl_cloud.spool import models as spool_models

# -- models of answers and of bodies no route validates with a model of its own ---------------------------


class Health(BaseModel):
    """``GET /healthz`` of every role."""

    status: str
    role: str


class CatalogDocument(BaseModel):
    """``POST /api/catalog`` as JSON (the raw YAML document is the other form)."""

    content: str


class ExecuteAnswer(BaseModel):
    """An execution started (or found by its dedup key)."""

    execution_id: str
    status: str
    execution_pool: str | None = None


class PushMessage(BaseModel):
    """A Pub/Sub message inside a push envelope (extra fields are kept)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    data: str | None = Field(default=None, description="base64 of the message data")
    attributes: dict[str, str] | None = None
    messageId: str | None = None  # Pub/Sub's field name
    publishTime: str | None = None  # Pub/Sub's field name


class PushEnvelope(BaseModel):
    """What a Pub/Sub push subscription POSTs (a wrapped delivery; an unwrapped one is the raw data)."""

    model_config = ConfigDict(extra="allow")
    message: PushMessage
    subscription: str | None = None


def _op(summary: str, **kwargs: Any) -> Operation:
    return Operation(summary, **kwargs)


_ID = {"type": "string", "pattern": "^[0-9]{1,19}$"}
_HEALTH = {("_healthz", "GET"): _op("Liveness of the process", answers={200: Health}, secured=False)}
_OPENAPI = {("openapi", "GET"): _op("This OpenAPI document")}
_PUSH_ERRORS = (400, 401, 403, 413, 503)
_REPLAY_QUERY = (
    Query("execution_id", _ID, required=True),
    Query("as_of_event_id", _ID),
    Query("as_of_position", {"type": "integer", "minimum": 0}),
    Query("as_of_time", {"type": "string", "format": "date-time"}),
    Query("projection", {"type": "string"}),
)
_REPLAY = {
    ("replay.replay_state", "GET"): _op(
        "An execution's state folded from its events, at a cutoff", query=_REPLAY_QUERY, errors=(400, 404)
    ),
    ("replay.replay_verify", "GET"): _op(
        "Whether replaying an execution's events reproduces its projection",
        query=(*_REPLAY_QUERY, Query("repair", {"type": "string", "enum": ["true", "false"]})),
        errors=(400, 404),
    ),
}

EXECUTE = RoleContract(
    title="NoETL Cloud execute (control plane)",
    description="Catalog, executions, commands and events, subscriptions, listener configuration. "
    "Every /api/ route needs a Google ID token of an allowed caller (locally a token of its purpose) and "
    "admits only some caller roles (403 forbidden_role otherwise; docs/security.md).",
    secured_prefixes=("/api/",),
    pages=("console",),  # the operators' console (docs/console.md), behind the same authentication
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("register_catalog", "POST"): _op(
            "Register a playbook or subscription document (YAML, or JSON {content})",
            body=CatalogDocument,
            raw_body="application/yaml",
            answers={200: None, 201: None},
            errors=(400, 413, 422),
        ),
        ("list_catalog", "GET"): _op(
            "Catalog entries", query=(Query("kind", {"type": "string", "enum": ["Playbook", "Subscription"]}),)
        ),
        ("get_catalog", "GET"): _op(
            "One catalog entry (latest, or ?version)",
            query=(Query("version", {"type": "string", "pattern": "^[0-9]+$"}),),
            errors=(400, 404),
        ),
        ("execute", "POST"): _op(
            "Start an execution", body=ExecuteRequest, answers={202: ExecuteAnswer}, errors=(400, 404, 413, 422)
        ),
        ("execute_batch", "POST"): _op(
            "Start executions, one result per item", body=BatchRequest, errors=(400, 413, 422)
        ),
        ("executions_api.list_executions", "GET"): _op(
            "Executions, newest first, by filter, a page at a time",
            query=(
                Query(
                    "status", {"type": "string"}, description="comma-separated: started, completed, failed, cancelled"
                ),
                Query("path", {"type": "string"}),
                Query("version", {"type": "string"}, description="with path"),
                Query("subscription", {"type": "string"}),
                Query("pool", {"type": "string"}),
                Query("parent", _ID),
                Query("since", {"type": "string", "format": "date-time"}),
                Query("until", {"type": "string", "format": "date-time"}),
                Query("cursor", {"type": "string"}, description="the previous page's next_cursor"),
                Query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
            ),
            errors=(400,),
        ),
        ("executions_api.get_execution", "GET"): _op("An execution", errors=(404,)),
        ("executions_api.rerun_execution", "POST"): _op(
            "Start the execution again with the same input (linked by meta.rerun_of)",
            answers={202: None},
            errors=(404, 409),
        ),
        ("bulk_reruns.start_reruns", "POST"): _op(
            f"Re-run every ended execution a filter matches (at most {MAX_MAX}), as one idempotent operation",
            body=BulkRerun,
            answers={202: None, 200: None},
            errors=(400, 409, 422),
        ),
        ("bulk_reruns.get_reruns", "GET"): _op("A bulk re-run operation's progress", errors=(404,)),
        ("payload_previews.preview_payload", "GET"): _op(
            "A bounded preview of a payload the execution's events refer to (Arrow rows as a table, text's head)",
            query=(
                Query("rows", {"type": "integer", "minimum": 1, "maximum": previews.MAX_ROWS}),
                Query("bytes", {"type": "integer", "minimum": 1, "maximum": previews.MAX_BYTES}),
            ),
            errors=(400, 404, 413, 422, 503),
        ),
        ("executions_api.execution_events", "GET"): _op(
            "An execution's events (after an event id; wait= long-polls for new ones)",
            query=(Query("after", _ID), Query("wait", {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S})),
            errors=(400, 404),
        ),
        ("spool_proxy.spool_get", "GET"): _op(
            "Forwarded to the spool drainer's GET /api/spool/... (its document describes them)",
            errors=(401, 403, 404, 422, 503),
        ),
        ("spool_proxy.spool_post", "POST"): _op(
            "Forwarded to the spool drainer's POST /api/spool/... (its document describes them)",
            raw_body="application/json",
            errors=(400, 401, 403, 404, 409, 413, 422, 503),
        ),
        ("traces.get_trace", "GET"): _op(
            "A trace's spans from the local exporter (NOETL_TRACING=local), or a redirect to Cloud Trace (cloud)",
            errors=(400, 404),
        ),
        ("cancel_execution", "POST"): _op(
            "Cancel an execution", body=Cancel, body_required=False, errors=(400, 404, 409, 422)
        ),
        ("get_command", "GET"): _op("A command", errors=(404,)),
        ("claim_command", "POST"): _op("Claim a command for a worker", body=WorkerRef, errors=(400, 404, 409, 422)),
        ("heartbeat_command", "POST"): _op("Extend a command's lease", body=WorkerRef, errors=(400, 404, 409, 422)),
        ("report_events", "POST"): _op(
            "A worker's report of a command (its events, outcome, next slots)",
            body=WorkerReport,
            errors=(400, 404, 409, 422),
        ),
        ("register_subscription", "POST"): _op(
            "Register a catalogued subscription",
            body=RegisterSubscription,
            answers={200: None, 201: None},
            errors=(400, 404, 422),
        ),
        ("transition", "POST"): _op(
            "A subscription lifecycle action (activate, pause, resume, drain, retire)",
            body=Transition,
            body_required=False,
            errors=(400, 404, 409, 422),
        ),
        ("list_subscriptions", "GET"): _op("Subscriptions", query=(Query("state", {"type": "string"}),)),
        ("get_subscription", "GET"): _op("A subscription", errors=(404,)),
        ("listener_config", "GET"): _op("A listener's configuration (the ingress reads it)", errors=(404,)),
        ("listener_audit", "POST"): _op(
            "Record an ingress verdict", body=Audit, answers={201: None}, errors=(400, 404, 422)
        ),
        ("reaper", "POST"): _op("Re-issue commands whose lease expired (scheduled)"),
        ("retention", "POST"): _op("Partitions ahead, expired executions archived, old partitions dropped (scheduled)"),
        ("subscription_tick", "POST"): _op("Run the due slot of every active scheduled subscription (scheduled)"),
        ("subscription_schedule", "GET"): _op("Scheduled subscriptions: cadence, state, next slot, last run"),
        ("outbox_relay", "GET"): _op("This instance's outbox relay counters"),
        ("sweep", "POST"): _op("Publish what the outbox relay left (scheduled)"),
        ("spool_events.record_spool_events", "POST"): _op(
            "Record spool events (the ingress and the drainer)", body=SpoolEventsIn, errors=(400, 422)
        ),
        ("runtime_events.record_runtime_events", "POST"): _op(
            "Record a subscription runtime's events", body=RuntimeEventsIn, errors=(400, 404, 409, 422)
        ),
        **_REPLAY,
    },
)

FRAMES = RoleContract(
    title="NoETL Cloud frames",
    description="Stage and frame leases: claim, heartbeat, commit; the reaper. Every /api/ route needs a "
    "Google ID token of the worker or the scheduler (locally their tokens), each admitted to its own routes.",
    secured_prefixes=("/api/",),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("claim", "POST"): _op("Claim frames of a stage", body=ClaimRequest, errors=(400, 404, 409, 422)),
        ("get_stage", "GET"): _op("A stage", errors=(404,)),
        ("heartbeat", "POST"): _op("Extend a frame's lease", body=HeartbeatRequest, errors=(400, 404, 409, 422)),
        ("commit", "POST"): _op("Commit a frame", body=CommitRequest, errors=(400, 404, 409, 422)),
        ("commit_many", "POST"): _op("Commit frames of a stage", body=BatchCommitRequest, errors=(400, 404, 409, 422)),
        ("reap", "POST"): _op("Release expired frame leases (scheduled)"),
        ("metrics", "GET"): _op("Backlog gauges (Prometheus text)", text=True, secured=False),
    },
)

PROJECTOR = RoleContract(
    title="NoETL Cloud projector",
    description="The push endpoint of noetl-events (POST /, a Pub/Sub push with its OIDC token; locally a "
    "bearer or ?token=), projection status, replay. /api/ routes need an internal caller's token.",
    secured_prefixes=("/api/", "/"),
    security=("bearer", "push_token"),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("push", "POST"): _op("Fold the execution of a pushed event", body=PushEnvelope, errors=_PUSH_ERRORS),
        ("status", "GET"): _op(
            "Projection status (of one execution with ?execution_id)",
            query=(Query("execution_id", _ID),),
            errors=(400, 404),
        ),
        ("catch_up", "POST"): _op("Fold executions whose projection is behind (scheduled)"),
        **_REPLAY,
    },
)

WORKER = RoleContract(
    title="NoETL Cloud worker",
    description="The push endpoint of a noetl-commands-<pool> subscription: claims, runs and reports one command. "
    "A Pub/Sub push with its OIDC token; locally a bearer or ?token=.",
    secured_prefixes=("/",),
    security=("bearer", "push_token"),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("push", "POST"): _op("Run a pushed command notification", body=PushEnvelope, errors=_PUSH_ERRORS),
    },
)

INGRESS = RoleContract(
    title="NoETL Cloud ingress",
    description="The public edge: POST /ingress/{listener} verifies a delivery with the listener's scheme "
    "(HMAC, Standard Webhooks, Stripe, GitHub, bearer, Pub/Sub OIDC), then starts an execution or spools it. "
    "Its credentials are per listener, not an OpenAPI security scheme.",
    security=(),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("receive", "POST"): _op(
            "A delivery to a listener",
            raw_body="application/json",
            query=(Query("token", {"type": "string"}, description="for listeners verified by a query token"),),
            answers={200: None, 202: None},
            errors=(400, 401, 403, 404, 413, 429, 503),
        ),
    },
)

SPOOL_DRAINER = RoleContract(
    title="NoETL Cloud spool drainer",
    description="Ordered replay of spooled deliveries (scheduled, and when a circuit closes). /drain and /api/ "
    "need an internal caller's token.",
    secured_prefixes=("/drain", "/api/"),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("drain", "POST"): _op(
            "Drain the spool of one or every subscription", body=spool_models.DrainRequest, body_required=False
        ),
        ("spool_subscriptions", "GET"): _op(
            "Spooling subscriptions: lanes (items, bytes, oldest item's age), dead letters, circuit",
            query=(Query("subscription", {"type": "string"}, description="only this subscription"),),
            answers={200: spool_models.SpoolSubscriptions},
            errors=(404, 422),
        ),
        ("spool_dead_letters", "GET"): _op(
            "One page of a subscription's dead letters, in lane then receive order",
            query=(
                Query("subscription", {"type": "string"}, required=True),
                Query("lane", {"type": "string"}),
                Query("reason", {"type": "string"}, description="the dead letter's dlq_reason, e.g. poison"),
                Query("limit", {"type": "integer", "minimum": 1, "maximum": spool_models.MAX_PAGE}),
                Query("after", {"type": "string"}, description="the previous page's next"),
            ),
            answers={200: spool_models.DeadLetterPage},
            errors=(404, 422),
        ),
        ("spool_resend", "POST"): _op(
            "Resend one dead letter to its lane (receive order kept), then drain",
            body=spool_models.ResendOne,
            answers={200: spool_models.Resent},
            errors=(400, 404, 409, 422),
        ),
        ("spool_resend_all", "POST"): _op(
            "Resend every dead letter a filter matches, as one operation (poll its record)",
            body=spool_models.ResendAll,
            answers={202: spool_models.ResendOperation},
            errors=(404, 422),
        ),
        ("spool_resend_operation", "GET"): _op(
            "A resend operation's progress", answers={200: spool_models.ResendOperation}, errors=(404,)
        ),
        ("spool_drain_now", "POST"): _op(
            "Drain one subscription now",
            body=spool_models.DrainOne,
            answers={200: spool_models.DrainResults},
            errors=(422,),
        ),
    },
)

SUBSCRIPTION_RUNTIME = RoleContract(
    title="NoETL Cloud subscription runtime (health)",
    description="The health server of a pull subscription runtime (a private Cloud Run service).",
    security=(),
    operations={
        **_HEALTH,
        **_OPENAPI,
        ("readyz", "GET"): _op("Ready once the subscription is held and flowing", errors=(503,)),
        ("status", "GET"): _op("The runtime's phase and counters"),
        ("metrics_text", "GET"): _op("Counters (Prometheus text)", text=True),
    },
)

CONTRACTS: dict[str, RoleContract] = {
    "execute": EXECUTE,
    "frames": FRAMES,
    "projector": PROJECTOR,
    "worker": WORKER,
    "ingress": INGRESS,
    "spool_drainer": SPOOL_DRAINER,
    "subscription_runtime": SUBSCRIPTION_RUNTIME,
}

SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A Google ID token of an allowed service account; locally the stack's token.",
    },
    "push_token": {
        "type": "apiKey",
        "in": "query",
        "name": "token",
        "description": "Locally, the emulator's push carries the push token in the endpoint's query.",
    },
}
