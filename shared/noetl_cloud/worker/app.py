"""The worker role: ``POST /`` is the push endpoint of a ``noetl-commands-<pool>`` subscription.

Order of a delivery: authenticate the push (a Google ID token minted for ``NOETL_WORKER_PUSH_AUDIENCE``
by ``NOETL_WORKER_PUSH_SERVICE_ACCOUNT``; locally the bearer ``NOETL_WORKER_PUSH_TOKEN``, in the
``Authorization`` header or, for the emulator's push, the endpoint's ``?token=``), only then
parse the push envelope (wrapped or unwrapped), read the notification from the message data (or, when
the data is not a JSON object, from the attributes) and hand it to the :class:`WorkerService`.

Answers: **200** ``{outcome, command_id[, status]}`` for everything Pub/Sub should ack; **400**
``invalid_notification`` / ``invalid_payload`` for a delivery that can never succeed (dead-lettered by
the subscription's policy); **401**/**403** for push credentials; **503** (``upstream_unavailable``,
``control_plane_refused``, ``oidc_jwks_unavailable``) when a retry may succeed.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Protocol

from flask import Flask, Response, jsonify, request

from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.auth.push import push_auth, push_credentials
from noetl_cloud.ingress.push import pubsub_message
from noetl_cloud.ingress.verify import CREDENTIAL_HEADERS
from noetl_cloud.observability import configure_logging
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app
from noetl_cloud.web.client import ApiClient, static_token
from noetl_cloud.web.id_tokens import google_id_token_source
from noetl_cloud.worker.service import Handled, Notification, WorkerService

log = logging.getLogger(__name__)

MAX_WORKER_ID = 128


class CommandHandler(Protocol):
    """What the push endpoint hands a notification to (:class:`WorkerService`)."""

    def handle(self, notification: Notification) -> Handled:
        """Claim, run and report; raise a retryable error to have the delivery redelivered."""
        ...


def build_app(settings: Settings, service: CommandHandler, auth: InternalAuth) -> Flask:
    app = create_app("worker", settings)
    install(app, auth)  # /api/openapi.json, behind the push credentials (a bearer in Authorization)

    @app.post("/")
    def push() -> tuple[Response, int]:
        caller = auth.authenticate(push_credentials(settings, "worker"))
        pushed = pubsub_message(
            request.get_data(cache=False),
            list(request.headers.items()),
            principal=caller.principal,
            payload_from="message.body",
            drop=CREDENTIAL_HEADERS,
            new_id=lambda: secrets.token_hex(8),
        )
        data = pushed.payload if isinstance(pushed.payload, dict) else pushed.attributes
        # The W3C context rides in the attributes (messaging.pubsub), beside a JSON body that lacks it.
        notification = Notification.from_mapping({"traceparent": pushed.attributes.get("traceparent"), **data})
        handled = service.handle(notification)
        return jsonify(handled.body()), 200

    return app


def default_worker_id(pool: str) -> str:
    """``worker-<pool>-<host>-<pid>``: unique per process, readable in events."""
    return f"worker-{pool}-{socket.gethostname()}-{os.getpid()}"[:MAX_WORKER_ID]


def auth_from_settings(settings: Settings) -> InternalAuth:
    """Push authentication: Google ID tokens of the push service account, and/or the local bearer token."""
    return push_auth(settings, "worker")


def service_from_settings(settings: Settings, env: Mapping[str, str] | None = None) -> WorkerService:
    """The worker service calling the control plane at ``NOETL_API_URL`` with the built-in tools; task
    credentials (``auth:`` aliases) resolved through the wallet (``env``: its ``NOETL_SECRET_*``)."""
    from noetl_cloud.telemetry.tools import traced_tools
    from noetl_cloud.tools.registry import default_registry

    settings.require("api_url")
    assert settings.api_url is not None
    if settings.internal_api_token is not None:
        token = static_token(settings.internal_api_token.get_secret_value())
    else:
        token = google_id_token_source(settings.internal_api_audience or settings.api_url)
    api = ApiClient(settings.api_url, token_source=token, timeout_s=10.0, retries=3)
    frames = None
    if settings.frames_url:  # cursor loops claim frames from the frames role (docs/frames.md)
        frames_token = token if settings.internal_api_token is not None else google_id_token_source(settings.frames_url)
        frames = ApiClient(settings.frames_url, token_source=frames_token, timeout_s=10.0, retries=3)
    from noetl_cloud.payload.bootstrap import payload_store
    from noetl_cloud.secrets import resolver_from_settings
    from noetl_cloud.secrets.keychain import SecretKeychain

    keychain = SecretKeychain(resolver_from_settings(settings, env or {}), prefix=settings.keychain_prefix)
    return WorkerService(
        api,
        worker_id=settings.worker_id or default_worker_id(settings.worker_pool),
        tools=traced_tools(default_registry(http_allow=settings.http_tool_allow)),
        heartbeat_s=settings.worker_heartbeat_s,
        eager_budget_s=settings.worker_eager_budget_s,
        eager_slots=settings.worker_eager_slots,
        frames=frames,
        payloads=payload_store(settings),
        keychain=keychain,
    )


def app_from_env(env: Mapping[str, str]) -> Flask:
    """The worker role, configured from the process environment (the entry point's one call)."""
    settings = Settings.from_env(env, role="worker")
    configure_logging(settings.log_level, project_id=settings.project_id, role="worker")
    auth = auth_from_settings(settings)
    service = service_from_settings(settings, env)
    log.info(
        "worker ready",
        extra={"worker_id": service.worker_id, "pool": settings.worker_pool, "auth": list(auth.methods)},
    )
    return build_app(settings, service, auth)
