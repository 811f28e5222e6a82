"""The spool engine and drainer on the real emulators: Firestore (circuits, leases, journal, marks) and
fake-gcs-server (items), with the control plane's spool-events endpoint on PostgreSQL.

Two engines stand for two instances: they share only what the emulators hold.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.kv.firestore import FirestoreKeyValueStore
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import ApiEventSink, EventJournal, MemoryEventSink
from noetl_cloud.spool.gcs import GcsSpool
from noetl_cloud.spool.target import SpoolTarget
from noetl_cloud.web.client import ApiResponse
from tests.contracts.kv import FakeClock
from tests.unit.spool_support import Control

PROJECT = "noetl-local"
SUB = "subscriptions/devices"


@pytest.fixture
def kv(local_env: dict[str, str]) -> Iterator[FirestoreKeyValueStore]:
    store = FirestoreKeyValueStore(
        project_id=PROJECT,
        collection=f"spool-test-{secrets.token_hex(6)}",
        emulator_host=local_env["FIRESTORE_EMULATOR_HOST"],
    )
    yield store
    store.close()


@pytest.fixture
def gcs(local_env: dict[str, str]) -> Iterator[GcsSpool]:
    raw = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": local_env["STORAGE_EMULATOR_HOST"]},
    )
    bucket = f"spool-test-{secrets.token_hex(6)}"
    raw.create_bucket(bucket)
    spool = GcsSpool(bucket, endpoint=local_env["STORAGE_EMULATOR_HOST"], project_id=PROJECT)
    yield spool
    spool.close()
    raw.close()


def target(**spool: Any) -> SpoolTarget:
    block: dict[str, Any] = {
        "mode": "buffer_and_ack",
        "backend": "gcs",
        "ordering": "per_key",
        "ordering_key": "x-device",
        "circuit": {"trip_after": 2, "probe_after_ms": 100},
    }
    block.update(spool)
    return SpoolTarget.from_spec(SUB, block, source_kind="push", downstream="execute:http://control")


def engine(kv: FirestoreKeyValueStore, gcs: GcsSpool, sink: Any, name: str, clock: Any = None) -> SpoolEngine:
    ids = itertools.count(int(datetime.now(UTC).timestamp() * 1000) * 1000)
    journal = EventJournal(sink, kv)
    extra = {"clock": clock} if clock is not None else {}
    return SpoolEngine(kv, journal, FixedBackend(gcs, "gcs://test"), ids=lambda: next(ids), instance=name, **extra)


def spool(eng: SpoolEngine, tgt: SpoolTarget, n: int, key: str) -> None:
    plan = {"playbook": "domain/handle", "request": {"path": "domain/handle"}}
    body = payload_bytes({"n": n, "key": key})
    eng.spool(tgt, body, message_id=f"m{n}", source="webhook", plan=plan, reason="circuit_open", ordering_key=key)


def test_a_circuit_opened_by_one_instance_sends_the_other_to_the_spool_and_one_drain_empties_it(
    kv: FirestoreKeyValueStore, gcs: GcsSpool
) -> None:
    sink = MemoryEventSink()
    clock = FakeClock(datetime.now(UTC))
    first, second = engine(kv, gcs, sink, "one", clock), engine(kv, gcs, sink, "two", clock)
    tgt = target()
    for _ in range(2):
        first.report(tgt, first.gate(tgt), ok=False)
    spool(second, tgt, 0, "a")
    assert second.gate(tgt).action == "spool" and second.backlog(SUB)
    for n in range(1, 6):
        spool(second, tgt, n, "ab"[n % 2])
    assert gcs.usage(SUB)[0] == 6 and gcs.lanes(SUB) == ["k-a", "k-b"]

    clock.advance(0.1)  # probe_after_ms
    control = Control()
    report = Drainer(first, control).drain(tgt)
    assert (report.state, report.replayed, report.probed) == ("drained", 6, True)
    assert control.order_of("a") == [0, 2, 4] and control.order_of("b") == [1, 3, 5]
    assert gcs.usage(SUB) == (0, 0) and not second.backlog(SUB)
    assert second.gate(tgt).action == "dispatch"
    types = [e.event_type for e in sink.events]
    assert types.count(ev.CIRCUIT_OPENED) == 1 and types.count(ev.CIRCUIT_CLOSED) == 1
    assert types.count(ev.SPOOLED) == 6 and types.count(ev.REPLAYED) == 6


def test_two_drainers_at_once_replay_every_item_exactly_once(kv: FirestoreKeyValueStore, gcs: GcsSpool) -> None:
    sink = MemoryEventSink()
    eng = engine(kv, gcs, sink, "one")
    tgt = target()
    for n in range(12):
        spool(eng, tgt, n, "abc"[n % 3])
    control = Control()
    lock = threading.Lock()
    replay = control.replay

    def serial(item: Any, payload: bytes) -> Any:
        with lock:
            return replay(item, payload)

    control.replay = serial  # type: ignore[method-assign]
    drainers = [Drainer(engine(kv, gcs, sink, f"d{i}"), control) for i in range(2)]
    threads = [threading.Thread(target=d.drain, args=(tgt,)) for d in drainers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Drainer(eng, control).drain(tgt)  # whatever a busy lane left
    assert sorted(r["workload"]["n"] for r in control.executions) == list(range(12))
    for key in "abc":
        assert control.order_of(key) == sorted(control.order_of(key))
    assert gcs.usage(SUB) == (0, 0)


def test_parked_events_survive_in_firestore_and_are_flushed_once(kv: FirestoreKeyValueStore) -> None:
    sink = MemoryEventSink()
    sink.down = True
    journal = EventJournal(sink, kv)
    opened = ev.circuit_opened("execute:x", SUB, datetime(2030, 1, 1, tzinfo=UTC), 3)
    journal.emit(SUB, [opened])
    journal.emit(SUB, [opened])
    sink.down = False
    assert EventJournal(sink, kv).flush(SUB) == 1
    assert [e.idempotency_key for e in sink.events] == [opened.idempotency_key]
    assert EventJournal(sink, kv).parked(SUB) == []


class FlaskApi:
    """The ApiClient's ``post`` over the control plane's Flask test client (same JSON, same statuses)."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client

    def post(self, path: str, json: Any = None) -> ApiResponse:
        response = self.client.post(path, json=json)
        return ApiResponse(response.status_code, response.get_json(silent=True), dict(response.headers))


def test_the_control_plane_records_each_spool_event_once_with_its_own_time(
    client: FlaskClient, database_url: str
) -> None:
    sink = ApiEventSink(FlaskApi(client))
    spooled_at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    opened = ev.circuit_opened("execute:http://control", SUB, spooled_at, 5)
    alert = ev.alert(SUB, "spool_full", "2030-01-02T03:04", bytes_used=10, max_bytes=5)
    assert sink.record([opened, alert]) == 2
    assert sink.record([opened, alert]) == 0
    bad = client.post("/api/internal/spool/events", json={"events": [{**opened.to_wire(), "event_type": "x"}]})
    assert bad.status_code in (400, 422) and "code" in bad.get_json()["error"]
    engine_ = create_engine(normalize_url(database_url))
    with engine_.connect() as conn:
        rows = conn.execute(
            text("SELECT event_type, stream_id, event_time, payload FROM event WHERE event_type LIKE 'subscription.%'")
        ).all()
    engine_.dispose()
    assert sorted((r.event_type, r.stream_id) for r in rows) == [
        (ev.CIRCUIT_OPENED, "circuit/execute:http://control"),
        (ev.ALERT, f"spool/{SUB}"),
    ]
    assert next(r for r in rows if r.event_type == ev.CIRCUIT_OPENED).event_time == spooled_at


@pytest.mark.parametrize("on_full", ["stop_acking", "drop_to_dlq", "alert_only"])
def test_on_full_on_gcs_refuses_dead_letters_or_alerts(kv: FirestoreKeyValueStore, gcs: GcsSpool, on_full: str) -> None:
    from noetl_cloud.spool.engine import SpoolFull

    sink = MemoryEventSink()
    eng = engine(kv, gcs, sink, "one")
    tgt = target(retention={"max_bytes": 700, "on_full": on_full})
    outcomes = []
    for n in range(6):
        try:
            spool(eng, tgt, n, "a")
            outcomes.append("ok")
        except SpoolFull as exc:
            outcomes.append(exc.code)
    live, dead = gcs.usage(SUB)[0], gcs.usage(SUB, dlq=True)[0]
    types = [e.event_type for e in sink.events]
    if on_full == "stop_acking":
        assert "spool_full" in outcomes and dead == 0 and live == outcomes.count("ok")
    elif on_full == "drop_to_dlq":
        assert set(outcomes) == {"ok"} and dead > 0 and live + dead == 6
        assert types.count(ev.DROPPED) == dead
    else:
        assert set(outcomes) == {"ok"} and live == 6 and dead == 0 and types.count(ev.ALERT) == 1


def test_items_past_max_age_leave_gcs_as_retention_expired_dead_letters(
    kv: FirestoreKeyValueStore, gcs: GcsSpool
) -> None:
    sink = MemoryEventSink()
    clock = FakeClock(datetime.now(UTC))
    eng = engine(kv, gcs, sink, "one", clock)
    tgt = target(retention={"max_age_hours": 1}, circuit={"trip_after": 1, "probe_after_ms": 86_400_000})
    eng.report(tgt, eng.gate(tgt), ok=False)
    for n in range(3):
        spool(eng, tgt, n, "a")
    clock.advance(3601)
    report = Drainer(eng, Control()).drain(tgt)
    assert (report.state, report.dead_lettered) == ("circuit_open", 3)
    assert gcs.usage(SUB)[0] == 0 and gcs.usage(SUB, dlq=True)[0] == 3
    dead = [e for e in sink.events if e.event_type == ev.DEAD_LETTERED]
    assert len(dead) == 3 and {e.payload["reason"] for e in dead} == {"retention_expired"}
