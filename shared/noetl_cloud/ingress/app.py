"""The ingress role: the only public service. ``POST /ingress/{listener}``.

It holds no database connection: listener configuration comes from the control plane (cached),
deliveries go to ``POST /api/execute`` with their delivery key (replay protection, claimed by the
control plane in the start's transaction); the spooler's circuit state lives in the coordination store.
Imports stay light (no SQLAlchemy, no pyarrow): cold start matters on the public edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from flask import Flask, Response, jsonify, request

from noetl_cloud.errors import PayloadTooLarge
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.ingress.stale import StaleTolerantDirectory
from noetl_cloud.observability import Counters, configure_logging
from noetl_cloud.settings import Settings
from noetl_cloud.spool.bootstrap import ingress_spooler, kv_from_settings
from noetl_cloud.web import create_app
from noetl_cloud.web.app import MAX_LISTENER_BODY
from noetl_cloud.web.client import ApiClient, static_token
from noetl_cloud.web.id_tokens import google_id_token_source


def build_app(settings: Settings, service: IngressService) -> Flask:
    # The app-wide cap is the largest body any listener may allow; each listener's own limit is
    # applied per request, from its configuration, before the body is read.
    app = create_app("ingress", settings.model_copy(update={"max_request_bytes": MAX_LISTENER_BODY}))

    @app.post("/ingress/<listener:listener>")
    def receive(listener: str) -> tuple[Response, int]:
        config = service.config(listener)
        limit = int(config.get("max_body_bytes") or settings.max_request_bytes)
        length = request.content_length
        if length is not None and length > limit:
            raise PayloadTooLarge(f"body of {length} bytes exceeds this listener's limit of {limit}")
        request.max_content_length = limit  # a chunked body one byte over it is 413, never cut (web.app)
        body = request.get_data(cache=False)
        outcome = service.handle(listener, config, body, list(request.headers.items()), request.args.to_dict())
        return jsonify(outcome.body()), outcome.http_status

    # No /metrics here: the public edge shows nothing of its listeners (issue #21 item 8). Its counters
    # go out through OpenTelemetry (NOETL_METRICS: Cloud Monitoring, or the local exporter).

    return app


def service_from_settings(settings: Settings) -> IngressService:
    settings.require("api_url")
    assert settings.api_url is not None
    if settings.internal_api_token is not None:
        token = static_token(settings.internal_api_token.get_secret_value())
    else:
        token = google_id_token_source(settings.internal_api_audience or settings.api_url)
    api = ApiClient(settings.api_url, token_source=token, timeout_s=10.0, retries=1)
    ids = SnowflakeGenerator(settings.node_id)

    @lru_cache(maxsize=8)
    def jwks_for(url: str | None) -> Any:
        from noetl_cloud.auth.google_oidc import GOOGLE_CERTS_URL, JwksCache

        return JwksCache(url or GOOGLE_CERTS_URL)

    return IngressService(
        StaleTolerantDirectory(api),
        api,
        new_id=ids.next_str,
        jwks_for=jwks_for,
        counters=Counters(),
        spooler=ingress_spooler(settings, api, kv_from_settings(settings)),
    )


def app_from_env(env: Mapping[str, str]) -> Flask:
    settings = Settings.from_env(env, role="ingress")
    configure_logging(settings.log_level, project_id=settings.project_id, role="ingress")
    return build_app(settings, service_from_settings(settings))
