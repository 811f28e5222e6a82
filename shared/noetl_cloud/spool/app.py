"""The spool drainer role: ``POST /drain`` (Cloud Scheduler, and whoever closes a circuit), and the
operators' ``/api/spool/*`` (the spool, its dead letters and their resend: :mod:`noetl_cloud.spool.routes`).

Body (optional): ``{"subscription": "<catalog path>", "resume": false}``. Without a subscription
every spooling subscription is drained (those with objects in the deployment's spool, and those
whose catalog entry spools). ``resume`` lifts the halt a poison message left on a ``global``
lane. The answer lists one report per subscription; a control plane that cannot be reached is
503 (the schedule tries again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.observability import configure_logging
from noetl_cloud.settings import Settings
from noetl_cloud.spool import routes
from noetl_cloud.spool.bootstrap import DrainService, drain_service
from noetl_cloud.spool.manage import SpoolManager
from noetl_cloud.spool.models import DrainRequest
from noetl_cloud.web import create_app, json_body


def build_app(
    settings: Settings,
    service: DrainService,
    auth: InternalAuth,
    *,
    manager: SpoolManager | None = None,
    spool_auth: InternalAuth | None = None,
) -> Flask:
    """``spool_auth`` authenticates the operators' ``/api/spool/*`` (default: ``auth``)."""
    app = create_app("spool_drainer", settings)
    install(app, auth, prefix="/drain/")
    install(app, spool_auth or auth, prefix=routes.PREFIX)
    install(app, auth, exclude=(routes.PREFIX,))  # /api/openapi.json

    @app.post("/drain")
    def drain() -> dict[str, Any]:
        from flask import request

        body = json_body(DrainRequest) if request.content_length else DrainRequest()
        subscriptions = [body.subscription] if body.subscription else None
        return {"results": service.run(subscriptions, resume=body.resume)}

    managed: list[SpoolManager] = [manager] if manager is not None else []

    def spool_manager() -> SpoolManager:
        if not managed:
            managed.append(SpoolManager(service.drainer.engine, service.targets, lambda sub: service.run([sub])))
        return managed[0]

    routes.register(app, spool_manager)
    return app


def app_from_env(env: Mapping[str, str]) -> Flask:
    settings = Settings.from_env(env, role="spool_drainer")
    configure_logging(settings.log_level, project_id=settings.project_id, role="spool_drainer")
    # Google ID tokens (NOETL_INTERNAL_API_AUDIENCE set: the control plane's, for the drainer's own calls
    # to the API) are minted by its callers for the URL they reach the drainer at: NOETL_SPOOL_DRAINER_URL,
    # the drainer's own URL. Without ID tokens (locally) that URL only tells where the drainer is.
    audience = None
    spool_audience: list[str] | None = None
    if settings.internal_api_audience is not None:
        audience = settings.spool_drainer_url or settings.internal_api_audience
        # The operators' /api/spool/* calls the control plane forwards (the console's spool page) carry
        # the operator's own ID token, minted for the control plane's URL: accepted there, and only there
        # (operators only, by the policy); /drain keeps the drainer's own audience.
        spool_audience = [audience, settings.internal_api_audience]
    auth = InternalAuth.from_settings(settings, audience=audience)
    spool_auth = InternalAuth.from_settings(settings, audience=spool_audience) if spool_audience else None
    return build_app(settings, drain_service(settings), auth, spool_auth=spool_auth)
