"""The ingress's spool seam filled by the spool engine (memory adapters), and the stale-tolerant directory."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from noetl_cloud.errors import Unavailable
from noetl_cloud.ingress.listeners import ControlPlaneUnavailable
from noetl_cloud.ingress.service import IngressService
from noetl_cloud.ingress.stale import StaleTolerantDirectory
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.ingress import IngressSpooler
from noetl_cloud.spool.replayer import replay_request
from noetl_cloud.web.client import ApiResponse
from tests.unit.spool_support import DOWNSTREAM, SUB, World, workload_of, world
from tests.unit.test_ingress_service import CONFIG, signed


class Api:
    """The control plane: up (202) or down (the client's retries exhausted)."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def post(self, path: str, json: Any = None) -> ApiResponse:
        self.calls += 1
        if self.down:
            raise Unavailable("down", code="upstream_unavailable")
        return ApiResponse(202, {"execution_id": f"e{self.calls}", "status": "started"}, {})

    def get(self, path: str) -> ApiResponse:
        if self.down:
            raise Unavailable("down", code="upstream_unavailable")
        return ApiResponse(200, {"listener": path.rsplit("/", 1)[-1], "n": self.calls}, {})


def config(mode: str) -> dict[str, Any]:
    spool = {"mode": mode, "backend": "gcs", "ordering": "per_key", "ordering_key": "x-device"}
    spool["circuit"] = {"trip_after": 2, "probe_after_ms": 60_000}
    return {**CONFIG, "path": SUB, "spool": spool}


def service(w: World, api: Api) -> IngressService:
    ids = itertools.count()
    return IngressService(
        directory=None,  # type: ignore[arg-type]
        api=api,  # type: ignore[arg-type]
        new_id=lambda: f"n{next(ids)}",
        jwks_for=lambda _url: None,
        spooler=IngressSpooler(w.engine, DOWNSTREAM),
    )


def deliver(svc: IngressService, cfg: dict[str, Any], n: int, device: str = "d1") -> Any:
    now = int(time.time())
    body = f'{{"n": {n}}}'.encode()
    return svc.handle("hooks", cfg, body, [*signed(body, f"msg_{n}", now), ("X-Device", device)])


def test_buffer_and_ack_spools_failed_forwards_then_skips_the_forward_while_the_circuit_is_open() -> None:
    w, api = world(), Api()
    svc, cfg = service(w, api), config("buffer_and_ack")
    api.down = True
    outcomes = [deliver(svc, cfg, n) for n in range(5)]
    assert {(o.status, o.http_status) for o in outcomes} == {("spooled", 202)}
    assert [o.reason for o in outcomes] == ["forward_failed"] * 2 + ["circuit_open"] * 3
    assert api.calls == 2  # trip_after forwards failed; the rest went straight to the spool
    refs = w.backend.list(SUB)
    assert len(refs) == 5 and w.backend.lanes(SUB) == ["k-d1"]
    item, payload = w.backend.get(refs[0])
    assert workload_of(payload)["payload"] == {"n": 0} and item.message_id == "msg_0"
    assert item.plan["request"]["parent_execution_id"] == "7" and item.plan["playbook"] == "domain/handle"
    assert ev.CIRCUIT_OPENED in w.types()
    # The same delivery again is spooled again, with the same delivery key: the drain's start of the
    # second copy is the first's duplicate (the control plane claims the key with the start).
    again = deliver(svc, cfg, 0)
    assert (again.status, again.http_status) == ("spooled", 202)
    copies = [w.backend.get(ref) for ref in w.backend.list(SUB)]
    keys = [replay_request(copy, data)["delivery"]["key"] for copy, data in copies]
    assert len(keys) == 6 and keys.count("hooks/msg_0") == 2


def test_hybrid_spools_for_a_push_source() -> None:
    w, api = world(), Api()
    api.down = True
    assert deliver(service(w, api), config("hybrid"), 1).status == "spooled"


def test_mode_off_answers_503_and_spools_nothing() -> None:
    w, api = world(), Api()
    api.down = True
    with pytest.raises(Unavailable) as refused:
        deliver(service(w, api), config("off"), 1)
    assert refused.value.status == 503 and w.backend.subscriptions() == []


def test_with_a_backlog_and_ordered_then_live_a_live_message_waits_in_the_spool_behind_its_lane() -> None:
    w, api = world(), Api()
    svc, cfg = service(w, api), config("buffer_and_ack")
    target = IngressSpooler(w.engine, DOWNSTREAM).target(cfg)
    w.spool(target, 0, key="d1")  # lane d1 waits (the backlog mark with it)
    outcome = deliver(svc, cfg, 1)
    assert (outcome.status, outcome.reason, api.calls) == ("spooled", "draining", 0)
    w.engine.clear_backlog(SUB, w.backend)  # not empty: the mark stays
    assert deliver(svc, cfg, 2).status == "spooled"
    # Another device's lane holds nothing: its live message overtakes nothing and goes straight through.
    other = deliver(svc, cfg, 3, device="d2")
    assert (other.status, api.calls) == ("accepted", 1)


def test_the_directory_serves_the_last_good_configuration_while_the_control_plane_is_down() -> None:
    api, clock = Api(), [0.0]
    directory = StaleTolerantDirectory(api, ttl_s=1.0, max_stale_s=100.0, clock=lambda: clock[0])
    first = directory.get("hooks")
    api.down = True
    clock[0] = 5.0
    assert directory.get("hooks") == first
    clock[0] = 200.0
    with pytest.raises(ControlPlaneUnavailable):
        directory.get("hooks")
    with pytest.raises(ControlPlaneUnavailable):
        directory.get("never-seen")
