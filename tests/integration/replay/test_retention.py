"""Retention on the real database (docs/retention.md): an archived execution replays from its Parquet
archive to the checksums it had live; a running execution, an unexpired dedup window and a tenant's
longer policy keep what they need; the partition of a day is dropped only once nothing live is in it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.envelope import utc_now
from noetl_cloud.projector.service import Projector
from noetl_cloud.replay.upcasters import default_registry
from noetl_cloud.retention import partitions
from noetl_cloud.retention.service import RetentionService
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import register
from tests.integration.distributed_driver import Driver
from tests.integration.replay_fixtures import chain_playbook

SCOPE = {"tenant_id": "acme", "organization_id": "ops"}
LATER = timedelta(days=40)  # past the default 30 days of retention


@pytest.fixture
def replay_settings(replay_settings: Settings, tmp_path: Path) -> Settings:
    """The replay tests' settings with a filesystem payload store and an archive folder of their own."""
    return replay_settings.model_copy(
        update={
            "payload_backend": "filesystem",
            "payload_dir": str(tmp_path / "payloads"),
            "archive_dir": str(tmp_path / "archive"),
        }
    )


def _completed(client: FlaskClient, plane: ControlPlane, steps: int = 3) -> str:
    register(client, chain_playbook("retention/chain", steps))
    driver = Driver(client, plane.engine)
    eid = driver.start("retention/chain")
    assert driver.run_to_end(eid)["status"] == "completed"
    return eid


def _state(client: FlaskClient, eid: str, **params: Any) -> dict[str, Any]:
    """The replayed state at ``params``' cutoff; at the execution's last event without one."""
    cutoff = params or {"as_of_position": str(2**62)}
    answer = client.get("/api/replay/state", query_string={**SCOPE, "execution_id": eid, **cutoff})
    assert answer.status_code == 200, answer.get_json()
    return dict(answer.get_json())


def _count(plane: ControlPlane, sql: str, **params: Any) -> int:
    with plane.engine.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def _rows_of(plane: ControlPlane, eid: str) -> dict[str, int]:
    tables = (
        "event",
        "execution",
        "command",
        "projection",
        "projection_tracking",
        "projection_snapshot",
        "subscription_dedup",
    )
    return {t: _count(plane, f"SELECT count(*) FROM {t} WHERE execution_id = :e", e=int(eid)) for t in tables}


def test_an_archived_execution_replays_from_its_archive_to_the_same_checksums(
    rclient: FlaskClient, rplane: ControlPlane
) -> None:
    eid = _completed(rclient, rplane)
    projected = Projector(rplane.engine, default_registry()).project("acme", "ops", eid)
    assert projected.outcome == "applied"  # its projection rows and tracking row go with it too
    assert _rows_of(rplane, eid)["projection_tracking"] == 1
    live = _state(rclient, eid)
    events = rclient.get(f"/api/executions/{eid}/events").get_json()["events"]
    middle = events[len(events) // 2]["event_id"]
    live_middle = _state(rclient, eid, as_of_event_id=middle)
    assert live["event_count"] == len(events) > 10

    result = RetentionService(rplane.engine, rplane.settings).sweep(now=utc_now() + LATER)

    assert result["archived"] == 1
    today = partitions.daily_name("event", utc_now())
    assert today in result["partitions_dropped"]  # nothing live was left in it
    assert _rows_of(rplane, eid) == dict.fromkeys(_rows_of(rplane, eid), 0)  # every row of it is gone
    assert _count(rplane, "SELECT count(*) FROM event_key") == 0  # the keys left with their partitions
    assert _count(rplane, "SELECT count(*) FROM stream WHERE stream_id = :s", s=f"execution/{eid}") == 0
    archived = _state(rclient, eid)
    assert archived["projection_checksums"] == live["projection_checksums"]
    assert archived["checksum"] == live["checksum"]
    assert archived["event_count"] == live["event_count"]
    assert archived["state"] == live["state"]
    assert _state(rclient, eid, as_of_event_id=middle)["checksum"] == live_middle["checksum"]
    query = {**SCOPE, "execution_id": str(int(eid) + 1), "as_of_position": "1"}
    missing = rclient.get("/api/replay/state", query_string=query)
    assert missing.status_code == 404


def test_a_running_execution_keeps_its_rows_and_its_partition(rclient: FlaskClient, rplane: ControlPlane) -> None:
    done = _completed(rclient, rplane)
    running = Driver(rclient, rplane.engine).start("retention/chain")  # issued, never run
    with rplane.engine.begin() as conn:  # started long ago: only its status keeps it
        conn.execute(
            text("UPDATE execution SET created_at = now() - interval '90 days' WHERE execution_id = :e"),
            {"e": int(running)},
        )
    before = _rows_of(rplane, running)

    result = RetentionService(rplane.engine, rplane.settings).sweep(now=utc_now() + LATER)

    assert result["archived"] == 1  # the completed one
    assert _rows_of(rplane, done)["execution"] == 0
    assert _rows_of(rplane, running) == before and before["event"] > 0 and before["command"] > 0
    assert partitions.daily_name("event", utc_now()) not in result["partitions_dropped"]
    assert _state(rclient, running)["event_count"] == before["event"]


def test_an_unexpired_dedup_window_and_a_longer_tenant_policy_keep_the_execution(
    rclient: FlaskClient, rplane: ControlPlane
) -> None:
    eid = _completed(rclient, rplane)
    later = utc_now() + LATER
    with rplane.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO subscription_dedup (scope, dedup_key, execution_id, seen_at, expires_at) "
                "VALUES ('acme/ops/sub', 'k1', :e, now(), :expires)"
            ),
            {"e": int(eid), "expires": later + timedelta(hours=1)},
        )
    service = RetentionService(rplane.engine, rplane.settings)

    assert service.sweep(now=later)["archived"] == 0  # the window still answers duplicates with it
    assert _rows_of(rplane, eid)["execution"] == 1 and _rows_of(rplane, eid)["subscription_dedup"] == 1

    with rplane.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO retention_policy (tenant_id, organization_id, retention_days) VALUES ('acme', '*', 90)")
        )
    after_window = later + timedelta(hours=2)
    assert service.sweep(now=after_window)["archived"] == 0  # the tenant keeps 90 days
    assert _rows_of(rplane, eid)["execution"] == 1

    with rplane.engine.begin() as conn:  # the organization's own row wins over the tenant's
        conn.execute(
            text("INSERT INTO retention_policy (tenant_id, organization_id, retention_days) VALUES ('acme', 'ops', 7)")
        )
    assert service.sweep(now=after_window)["archived"] == 1
    assert _rows_of(rplane, eid) == dict.fromkeys(_rows_of(rplane, eid), 0)


def test_partitions_are_kept_ahead_and_a_row_in_the_default_partition_moves_to_its_day(
    rplane: ControlPlane,
) -> None:
    ahead = utc_now() + timedelta(days=20)
    with rplane.engine.begin() as conn:  # an outbox row of a day that has no partition yet
        conn.execute(
            text("INSERT INTO outbox (topic, data, status, created_at) VALUES ('t', '{}', 'failed', :at)"),
            {"at": ahead},
        )
    with rplane.engine.begin() as conn:
        created = partitions.ensure_ahead(conn, 2, ahead)
    name = partitions.daily_name("outbox", ahead)
    assert name in created and partitions.daily_name("event", ahead + timedelta(days=2)) in created
    assert _count(rplane, f'SELECT count(*) FROM "{name}"') == 1
    assert _count(rplane, "SELECT count(*) FROM outbox_default") == 0
    with rplane.engine.begin() as conn:
        assert partitions.ensure_ahead(conn, 2, ahead) == []  # idempotent
        # Partitions far ahead do not stand for the days before them: today's is made again once dropped.
        today = partitions.daily_name("event", utc_now())
        conn.execute(text(f'DROP TABLE IF EXISTS "{today}"'))
        assert today in partitions.ensure_ahead(conn, 0, utc_now())
