"""Fixtures of the frames tests: the frames role's Flask app on a fresh database, with an execution to
hang stages on, and helpers to read the frame events and rows back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from pydantic import SecretStr
from sqlalchemy import Engine, text

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.eventlog.stored import envelope_fields, stream_text
from noetl_cloud.frames.app import FramesPlane, build_app
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.frames.service import FrameService
from noetl_cloud.messaging.memory import InMemoryPublisher
from noetl_cloud.settings import Settings

TOKEN = "frames-token"


@dataclass
class Frames:
    plane: FramesPlane
    publisher: InMemoryPublisher

    @property
    def service(self) -> FrameService:
        return self.plane.service

    @property
    def engine(self) -> Engine:
        return self.plane.engine

    def client(self) -> FlaskClient:
        app = build_app(self.plane.settings, self.service, InternalAuth(token=TOKEN))
        client = app.test_client()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
        return client

    def execution(self, status: str = "started") -> int:
        execution_id = self.plane.ids.next_id()
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO execution (execution_id, tenant_id, organization_id, path, status, execution_pool) "
                    "VALUES (:id, :t, :o, 'tests/frames', :status, 'shared')"
                ),
                {
                    "id": execution_id,
                    "t": self.plane.settings.tenant_id,
                    "o": self.plane.settings.organization_id,
                    "status": status,
                },
            )
        return execution_id

    def stage(self, *, frame_limit: int | None = None, execution_id: int | None = None, **policy: Any) -> str:
        eid = execution_id if execution_id is not None else self.execution()
        opened = self.service.open_stage(eid, "fetch", FramePolicy(**policy), frame_limit=frame_limit)
        return str(opened["stage_id"])

    def events(self, stage_id: str, *types: str) -> list[dict[str, Any]]:
        """The frame events of a stage in log order (``types`` filters), their envelope fields whole."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT event_id, tenant_id, organization_id, execution_id, event_type, stream_id, stream_version, "
                    "causation_id, "
                    "schema_name, aggregate_id, correlation_id, producer, idempotency_key, payload, payload_ref, "
                    "envelope_checksum FROM event WHERE stream_id LIKE :frames ORDER BY position"
                ),
                # as stored (noetl_cloud.eventlog.stored): after their execution's "execution/<id>"
                {"frames": f"\x01/stage/{stage_id}/frame/%"},
            )
            found = [{**r._mapping, **envelope_fields(r._mapping)} for r in rows]
        return [e for e in found if not types or e["event_type"] in types]

    def frame(self, frame_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM frame WHERE frame_id = :f"), {"f": int(frame_id)}).one()
        return dict(row._mapping)

    def frames(self, stage_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT * FROM frame WHERE stage_id = :s ORDER BY frame_index"), {"s": int(stage_id)}
            )
            return [dict(r._mapping) for r in rows]

    def stage_events(self, stage_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT event_type, payload, stream_id, execution_id FROM event WHERE aggregate_type = 'stage' "
                    "AND aggregate_id = :s ORDER BY position"
                ),
                {"s": stage_id},
            )
            return [{**r._mapping, "stream_id": stream_text(r.stream_id, r.execution_id)} for r in rows]


@pytest.fixture
def frames(database_url: str) -> Iterator[Frames]:
    settings = Settings(
        database_url=database_url,
        environment="test",
        role="frames",
        internal_api_token=SecretStr(TOKEN),
        db_pool_size=12,
        db_max_overflow=12,
        outbox_sweep_every_s=0,
    )
    publisher = InMemoryPublisher()
    plane = FramesPlane(settings, publisher_override=publisher)
    yield Frames(plane, publisher)
    plane.service.flush()
    plane.service.relay.close()  # type: ignore[union-attr]
    plane.engine.dispose()


def claim(client: FlaskClient, stage_id: str, worker: str, **extra: Any) -> Any:
    return client.post(f"/api/stages/{stage_id}/frames/claim", json={"worker_id": worker, **extra})


def heartbeat(client: FlaskClient, frame_id: str, worker: str, **extra: Any) -> Any:
    return client.post(f"/api/frames/{frame_id}/heartbeat", json={"worker_id": worker, **extra})


def commit(client: FlaskClient, frame_id: str, worker: str, **extra: Any) -> Any:
    body = {"worker_id": worker, "status": "COMPLETED", "row_count": 1, "cursor": {}, **extra}
    return client.post(f"/api/frames/{frame_id}/commit", json=body)
