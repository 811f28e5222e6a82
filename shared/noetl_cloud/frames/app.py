"""The frames role's HTTP API (docs/frames.md): stage/frame leases for workers, the reaper, the backlog.

=================================================  ==========================================================
``POST /api/stages/{stage_id}/frames/claim``        ``ClaimRequest`` → 200 ``{frames: [...]}`` | 404 | 409
``GET  /api/stages/{stage_id}``                     the stage and its frame counts
``POST /api/frames/{frame_id}/heartbeat``           ``HeartbeatRequest`` → 200 ``{lease_until}`` | 404 | 409
``POST /api/frames/{frame_id}/commit``              ``CommitRequest`` → 200 ``{ok, terminal_event_id}`` | 409 | 422
``POST /api/stages/{stage_id}/frames/commit``       ``BatchCommitRequest`` → 200 ``{results: [...]}`` | 404 | 422
``POST /api/internal/frames/reap``                  release expired leases (Cloud Scheduler)
``GET  /metrics``                                   ``noetl_frame_backlog_total`` and friends (autoscaling)
=================================================  ==========================================================

Every ``/api/*`` call is authenticated as the other internal APIs are (:mod:`noetl_cloud.auth.internal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from flask import Flask, Response
from sqlalchemy import Engine

from noetl_cloud.auth.internal import InternalAuth, install
from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.envelope import EventFactory
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import relay_for
from noetl_cloud.frames.models import BatchCommitRequest, ClaimRequest, CommitRequest, HeartbeatRequest
from noetl_cloud.frames.service import FrameService
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.messaging.port import Publisher
from noetl_cloud.observability import configure_logging
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app, json_body


@dataclass
class FramesPlane:
    """The frames role's composition root: adapters wired on first use, per process."""

    settings: Settings
    publisher_override: Publisher | None = None

    @cached_property
    def engine(self) -> Engine:
        return create_db_engine(self.settings)

    @cached_property
    def ids(self) -> SnowflakeGenerator:
        return SnowflakeGenerator(self.settings.node_id)

    @cached_property
    def events(self) -> EventFactory:
        s = self.settings
        return EventFactory(
            tenant_id=s.tenant_id,
            organization_id=s.organization_id,
            producer=f"noetl://tenant/{s.tenant_id}/org/{s.organization_id}/role/frames/node/{self.ids.node_id}",
            next_id=self.ids.next_id,
        )

    @cached_property
    def publisher(self) -> Publisher:
        if self.publisher_override is not None:
            return self.publisher_override
        from noetl_cloud.messaging.pubsub import PubSubPublisher

        self.settings.require("project_id")
        assert self.settings.project_id is not None
        return PubSubPublisher(self.settings.project_id, emulator_host=self.settings.pubsub_emulator_host)

    @cached_property
    def service(self) -> FrameService:
        return FrameService(
            self.engine,
            PostgresEventStore(self.engine, events_topic=self.settings.events_topic),
            relay_for(self.engine, self.publisher, self.settings),
            self.ids,
            self.events,
            reaper_limit=self.settings.frame_reaper_limit,
        )


def metrics_text(backlog: Mapping[str, int], tenant_id: str, organization_id: str) -> str:
    """The Prometheus text exposition of the frame backlog (gauges, one sample each)."""
    labels = f'tenant_id="{tenant_id}",organization_id="{organization_id}"'
    lines = []
    for name, key, help_text in (
        ("noetl_frame_backlog_total", "backlog", "frames claimable now or still to be minted by open stages"),
        ("noetl_frame_claimable", "claimable", "pending frames and frames whose lease expired"),
        ("noetl_frame_leased", "leased", "frames under a live lease"),
        ("noetl_stages_open", "stages_open", "stages not yet closed"),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {backlog[key]}"]
    return "\n".join(lines) + "\n"


def build_app(settings: Settings, service: FrameService, auth: InternalAuth) -> Flask:
    app = create_app("frames", settings)
    install(app, auth)

    @app.post("/api/stages/<int:stage_id>/frames/claim")
    def claim(stage_id: int) -> dict[str, Any]:
        return service.claim(stage_id, json_body(ClaimRequest))

    @app.get("/api/stages/<int:stage_id>")
    def get_stage(stage_id: int) -> dict[str, Any]:
        return service.stage(stage_id)

    @app.post("/api/frames/<int:frame_id>/heartbeat")
    def heartbeat(frame_id: int) -> dict[str, Any]:
        return service.heartbeat(frame_id, json_body(HeartbeatRequest))

    @app.post("/api/frames/<int:frame_id>/commit")
    def commit(frame_id: int) -> dict[str, Any]:
        return service.commit(frame_id, json_body(CommitRequest))

    @app.post("/api/stages/<int:stage_id>/frames/commit")
    def commit_many(stage_id: int) -> dict[str, Any]:
        return service.commit_many(stage_id, json_body(BatchCommitRequest))

    @app.post("/api/internal/frames/reap")
    def reap() -> dict[str, Any]:
        return service.reap()

    @app.get("/metrics")
    def metrics() -> Response:
        body = metrics_text(service.backlog(), settings.tenant_id, settings.organization_id)
        return Response(body, mimetype="text/plain; version=0.0.4")

    return app


def app_from_env(env: Mapping[str, str]) -> Flask:
    """The frames role, configured from the process environment (the entry point's one call)."""
    settings = Settings.from_env(env, role="frames")
    configure_logging(settings.log_level, project_id=settings.project_id, role="frames")
    auth = InternalAuth.from_settings(settings, audience=settings.internal_api_audience)
    return build_app(settings, FramesPlane(settings).service, auth)
