"""The drainer's ``/api/spool/*`` exercised end to end on one spool: the unit test runs it on the memory
adapters, the integration test on the emulators (fake-gcs-server, the Firestore emulator)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from flask.testing import FlaskClient

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.settings import Settings
from noetl_cloud.spool.app import build_app
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.bootstrap import DrainService
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.item import SpoolItem
from noetl_cloud.spool.manage import SpoolManager
from noetl_cloud.spool.port import SpoolBackend
from noetl_cloud.spool.target import SpoolTarget
from tests.unit.spool_support import Control

TOKEN = "spool-manage-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Targets:
    """The catalog as the drainer sees it: one spooling subscription."""

    target_of: SpoolTarget

    def target(self, subscription: str) -> SpoolTarget | None:
        return self.target_of if subscription == self.target_of.subscription else None

    def spooling(self) -> list[str]:
        return [self.target_of.subscription]


@dataclass
class Rig:
    client: FlaskClient
    backend: SpoolBackend
    engine: SpoolEngine
    control: Control
    target: SpoolTarget
    sink: MemoryEventSink

    def resent(self) -> list[dict[str, Any]]:
        return [e.payload for e in self.sink.events if e.event_type == "subscription.message.resent"]


def rig(backend: SpoolBackend, kv: KeyValueStore, subscription: str, **engine_options: Any) -> Rig:
    ids = itertools.count(1)
    sink = MemoryEventSink()
    engine = SpoolEngine(
        kv, EventJournal(sink, kv), FixedBackend(backend, "test"), ids=lambda: next(ids), **engine_options
    )
    block = {"mode": "buffer_and_ack", "backend": "gcs", "ordering": "per_key", "ordering_key": "x-device"}
    target = SpoolTarget.from_spec(subscription, block, source_kind="push", downstream="execute:http://control")
    control = Control()
    service = DrainService(Drainer(engine, control, sleep=lambda _s: None), Targets(target))

    def now(work: Callable[[], None]) -> None:  # the background work runs before the answer, so tests see its end
        work()

    manager = SpoolManager(engine, service.targets, lambda sub: service.run([sub]), background=now)
    app = build_app(Settings(), service, InternalAuth(token=TOKEN), manager=manager)
    return Rig(app.test_client(), backend, engine, control, target, sink)


def dead_letter(r: Rig, n: int, lane: str, reason: str) -> str:
    """Spool ``m<n>`` in lane ``k-<lane>`` (per_key), dead-letter it with ``reason``; its dead-letter name."""
    spooled = r.engine.spool(
        r.target,
        payload_bytes({"n": n, "key": lane}),
        message_id=f"m{n}",
        source="webhook",
        plan={"playbook": "domain/handle", "request": {"path": "domain/handle"}},
        reason="circuit_open",
        ordering_key=lane,
    )
    return r.backend.move_to_dlq(r.backend.update_attempts(spooled.ref, 5), reason).name


def exercise(r: Rig) -> None:
    sub = r.target.subscription
    names = [dead_letter(r, n, lane, reason) for n, lane, reason in ((1, "a", "poison"), (2, "b", "poison"))]
    names.append(dead_letter(r, 3, "a", "retention_expired"))
    r.engine.spool(
        r.target, payload_bytes({"n": 4, "key": "a"}), message_id="m4", source="webhook",
        plan={"playbook": "domain/handle"}, reason="circuit_open", ordering_key="a",
    )  # fmt: skip

    # the overview: lanes with counts, bytes and the oldest item's age; dead letters; the circuit
    (view,) = client_json(r, "GET", f"/api/spool/subscriptions?subscription={sub}")["items"]
    assert view["subscription"] == sub and view["registered"] and view["circuit"]["state"] == "closed"
    assert [(lane["lane"], lane["items"]) for lane in view["lanes"]] == [("k-a", 1)] and view["items"] == 1
    assert view["lanes"][0]["bytes"] > 0 and view["lanes"][0]["oldest_age_s"] >= 0
    assert view["dead_letters"]["items"] == 3 and view["dead_letters"]["lanes"] == ["k-a", "k-b"]
    assert [v["subscription"] for v in client_json(r, "GET", "/api/spool/subscriptions")["items"]] == [sub]

    # dead letters: filtered, in lane then receive order, paged
    page = client_json(r, "GET", f"/api/spool/dead-letters?subscription={sub}&reason=poison&limit=1")
    assert [row["message_id"] for row in page["items"]] == ["m1"] and page["next"] == names[0]
    query = urlencode({"subscription": sub, "reason": "poison", "after": page["next"]})
    rest = client_json(r, "GET", f"/api/spool/dead-letters?{query}")
    assert [row["message_id"] for row in rest["items"]] == ["m2"] and rest["next"] is None
    lane_b = client_json(r, "GET", f"/api/spool/dead-letters?subscription={sub}&lane=k-b")["items"]
    assert [(row["message_id"], row["reason"], row["attempts"]) for row in lane_b] == [("m2", "poison", 5)]

    # resend one: back in its lane, then drained (replayed through the control plane)
    answer = client_json(r, "POST", "/api/spool/dead-letters/resend", {"subscription": sub, "name": names[1]})
    assert answer["live_name"] == names[1].replace("/dlq/", "/", 1) and answer["drain"] == "started"
    assert [req["workload"]["n"] for req in r.control.executions] == [4, 2]  # lane a's live item, then m2
    assert r.backend.list(sub) == [] and len(r.backend.list(sub, dlq=True)) == 2
    (event,) = r.resent()  # the operator's resend is in the spool's event stream, with who asked
    assert (event["message_id"], event["dlq_reason"], event["attempts"]) == ("m2", "poison", 5)
    assert event["by"] == "internal-api-token" and event["operation_id"] is None
    gone = r.client.post("/api/spool/dead-letters/resend", json={"subscription": sub, "name": names[1]}, headers=AUTH)
    assert gone.status_code == 404 and gone.get_json()["error"]["code"] == "spool_item_not_found"
    foreign = r.client.post(
        "/api/spool/dead-letters/resend", json={"subscription": sub, "name": "other/dlq/a/x"}, headers=AUTH
    )
    assert foreign.status_code == 400 and foreign.get_json()["error"]["code"] == "not_a_dead_letter"

    # resend all that match (lane a): one operation, its record polled
    started = r.client.post("/api/spool/resends", json={"subscription": sub, "lane": "k-a"}, headers=AUTH)
    assert started.status_code == 202, started.get_json()
    operation = started.get_json()
    record = client_json(r, "GET", f"/api/spool/resends/{operation['operation_id']}")
    assert (record["state"], record["matched"], record["resent"], record["failed"]) == ("done", 2, 2, 0)
    assert record["drain"][0]["state"] in ("drained", "empty") and record["finished_at"]
    # receive order within lane a: m1 (seq 1) before m3 (seq 3)
    assert [req["workload"]["n"] for req in r.control.executions] == [4, 2, 1, 3]
    assert r.backend.list(sub, dlq=True) == [] and r.backend.list(sub) == []
    assert [(e["message_id"], e["operation_id"]) for e in r.resent()[1:]] == [
        ("m1", operation["operation_id"]),
        ("m3", operation["operation_id"]),
    ]

    # drain now
    assert client_json(r, "POST", "/api/spool/drain", {"subscription": sub})["results"][0]["state"] == "empty"

    # errors: JSON, stable codes, never a 500 for the caller's input
    for method, path, body, status, code in (
        ("GET", "/api/spool/resends/0123abcd", None, 404, "operation_not_found"),
        ("GET", "/api/spool/resends/not-an-id!", None, 404, "operation_not_found"),
        ("GET", f"/api/spool/dead-letters?subscription={sub}&limit=0", None, 422, "validation_failed"),
        ("GET", "/api/spool/dead-letters", None, 422, "validation_failed"),
        ("GET", f"/api/spool/subscriptions?subscription={sub}&bogus=1", None, 422, "validation_failed"),
        ("POST", "/api/spool/resends", {"subscription": sub, "extra": 1}, 422, "validation_failed"),
        ("POST", "/api/spool/dead-letters/resend", {"subscription": sub}, 422, "validation_failed"),
        ("POST", "/api/spool/resends", {"subscription": sub, "lane": "ü" * 100}, 400, "invalid_spool_name"),
    ):
        answer_ = r.client.open(path, method=method, json=body, headers=AUTH)
        assert (answer_.status_code, answer_.get_json()["error"]["code"]) == (status, code), (path, answer_.get_json())
    refused = r.client.get("/api/spool/subscriptions")
    assert refused.status_code == 401 and refused.get_json()["error"]["code"] == "missing_credentials"


def client_json(r: Rig, method: str, path: str, body: Any = None) -> Any:
    answer = r.client.open(path, method=method, json=body, headers=AUTH)
    assert answer.status_code == 200, (path, answer.status_code, answer.get_json())
    return answer.get_json()


__all__ = ["Rig", "SpoolItem", "exercise", "rig"]
