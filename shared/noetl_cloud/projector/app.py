"""The projector role: ``POST /`` is the push endpoint of the ``noetl-events`` subscription.

Order of a delivery: authenticate the push (a Google ID token minted for
``NOETL_PROJECTOR_PUSH_AUDIENCE`` by ``NOETL_PROJECTOR_PUSH_SERVICE_ACCOUNT``; locally the bearer
``NOETL_PROJECTOR_PUSH_TOKEN``, in the ``Authorization`` header or as the endpoint's ``?token=``),
then parse the push envelope and read the event id from the message data (the outbox's
``{"event_id", "execution_id"}``, or a settle's bundle of them: ``projector/deliveries.py``), then
fold (:class:`~noetl_cloud.projector.service.Projector`).

Answers: **200** ``{outcome, event_id, ...}`` (a bundle: ``{deliveries, results: [...]}``) for
everything Pub/Sub should ack — ``applied``, ``duplicate``, and ``unknown_event`` /
``no_execution`` (nothing to fold here); **400** ``invalid_payload`` / ``invalid_notification``
for a message that can never succeed (dead-lettered); **401**/**403** for push credentials;
**5xx** when the database is unavailable, so Pub/Sub redelivers.

Under ``/api/`` (internal API auth): ``GET /api/projector/status`` (projection lag and the last
applied event id, of the latest write or of one execution), the replay API, and
``POST /api/internal/projector/catch-up`` (Cloud Scheduler): fold the executions whose projection fell
behind their log without a delivery due (``NOETL_PROJECTOR_CATCHUP_WINDOW_S``, ``_SETTLE_S``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from flask import Flask, request

from noetl_cloud.auth import push as push_endpoint
from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.ingress.push import pubsub_message
from noetl_cloud.ingress.verify import CREDENTIAL_HEADERS
from noetl_cloud.observability import configure_logging
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.projector.deliveries import deliveries_of, fold_each
from noetl_cloud.replay import api as replay_api
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app


def build_app(role: ProjectorRole, push_auth: InternalAuth, api_auth: InternalAuth) -> Flask:
    settings = role.settings
    app = create_app("projector", settings)
    install(app, api_auth)

    @app.post("/")
    def push() -> tuple[dict[str, Any], int]:
        push_auth.authenticate(push_endpoint.push_credentials(settings, "projector"))
        pushed = pubsub_message(
            request.get_data(cache=False),
            list(request.headers.items()),
            principal="pubsub",
            payload_from="message.body",
            drop=CREDENTIAL_HEADERS,
            new_id=lambda: secrets.token_hex(8),
        )
        deliveries = deliveries_of(pushed.payload, pushed.attributes)
        return fold_each(deliveries, role.projector.handle, role.folds), 200

    @app.get("/api/projector/status")
    def status() -> dict[str, Any]:
        if "execution_id" not in request.args:
            return role.projector.status()
        return role.projector.status(replay_api.scope())

    @app.post("/api/internal/projector/catch-up")
    def catch_up() -> dict[str, Any]:
        return role.projector.catch_up(
            settings.tenant_id,
            settings.organization_id,
            window_s=settings.projector_catchup_window_s,
            settle_s=settings.projector_catchup_settle_s,
        )

    app.register_blueprint(replay_api.blueprint(lambda: role.replay))
    return app


def push_auth_from_settings(settings: Settings) -> InternalAuth:
    """Push authentication: Google ID tokens of the push service account, and/or the local bearer token."""
    return push_endpoint.push_auth(settings, "projector")


def app_from_env(env: Mapping[str, str]) -> Flask:
    """The projector role, configured from the process environment (the entry point's one call)."""
    settings = Settings.from_env(env, role="projector")
    configure_logging(settings.log_level, project_id=settings.project_id, role="projector")
    api_auth = InternalAuth.from_settings(settings, audience=settings.internal_api_audience)
    return build_app(ProjectorRole(settings), push_auth_from_settings(settings), api_auth)
