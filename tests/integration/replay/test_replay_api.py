"""GET /api/replay/state on the control plane: time travel at ten cutoffs of a 50-step execution, the
snapshot-seeded fold equal to the full fold, tenant scoping, cutoff and projection validation."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import text

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.envelope import EventEnvelope
from noetl_cloud.projector.bootstrap import ProjectorRole
from noetl_cloud.replay import SURFACES, ReplayState, default_registry, fold
from noetl_cloud.replay.events import from_envelope
from noetl_cloud.replay.service import Cutoff
from tests.integration.control_fixtures import register
from tests.integration.distributed_driver import Driver
from tests.integration.replay_fixtures import chain_playbook

SCOPE = {"tenant_id": "acme", "organization_id": "ops"}


def _run_chain(client: FlaskClient, plane: ControlPlane, steps: int) -> tuple[str, list[EventEnvelope]]:
    register(client, chain_playbook("replay/chain", steps))
    driver = Driver(client, plane.engine)
    eid = driver.start("replay/chain")
    assert driver.run_to_end(eid)["status"] == "completed"
    answered = client.get(f"/api/executions/{eid}/events").get_json()["events"]
    # The envelope's fields of each event (the API adds others beside them, e.g. its log position).
    events = [EventEnvelope(**{k: v for k, v in e.items() if k in EventEnvelope.model_fields}) for e in answered]
    return eid, events


def _independent_fold(events: list[EventEnvelope]) -> ReplayState:
    """A fold of the envelopes the events API returned (positions are their index: rows carry none)."""
    return fold([from_envelope(e, i) for i, e in enumerate(events, 1)], default_registry())


def _state(client: FlaskClient, eid: str, **params: Any) -> Any:
    return client.get("/api/replay/state", query_string={**SCOPE, "execution_id": eid, **params})


def test_time_travel_at_ten_cutoffs_equals_the_fold_of_the_events_up_to_each_and_snapshots_agree(
    rclient: FlaskClient, rplane: ControlPlane, projector_role: ProjectorRole
) -> None:
    eid, events = _run_chain(rclient, rplane, 50)
    assert len(events) > 300
    cuts = [round(len(events) * k / 10) for k in range(1, 11)]
    full: dict[int, dict[str, Any]] = {}
    for n, cut in enumerate(cuts):
        last = events[cut - 1]
        params = {"as_of_event_id": last.event_id} if n % 2 else {"as_of_position": _position(rplane, last)}
        answer = _state(rclient, eid, **params).get_json()
        expected = _independent_fold(events[:cut])
        assert answer["event_count"] == cut and answer["last_event_id"] == last.event_id
        assert answer["projection_checksums"] == expected.surface_checksums()
        assert answer["checksum"] == expected.checksum()
        assert answer["state"]["commands"] == expected.rows("commands")
        assert answer["seeded_from_snapshot_position"] is None  # no snapshot written yet
        full[cut] = answer
    # The projector writes a snapshot every 25 events and keeps the newest 3 plus the anchors (every 100
    # events); replay then seeds from the newest one kept at or before each cutoff.
    assert projector_role.projector.project("acme", "ops", eid).applied == len(events)
    with rplane.engine.connect() as conn:
        kept = conn.execute(
            text(
                "SELECT position, event_count, state IS NULL AND state_compressed IS NOT NULL AS compact "
                "FROM projection_snapshot WHERE execution_id = :e ORDER BY position"
            ),
            {"e": int(eid)},
        ).all()
    last = len(events) // 25 * 25
    expected_counts = sorted({*range(100, last + 1, 100), last - 50, last - 25, last})
    assert [r.event_count for r in kept] == expected_counts and all(r.compact for r in kept)
    for cut, answer in full.items():
        seeded = _state(rclient, eid, as_of_event_id=events[cut - 1].event_id).get_json()
        below = [r.position for r in kept if r.position <= seeded["cutoff_position"]]
        assert seeded["seeded_from_snapshot_position"] == (below[-1] if below else None)
        assert (seeded["checksum"], seeded["projection_checksums"]) == (
            answer["checksum"],
            answer["projection_checksums"],
        )
    unseeded = rplane.replay.replay("acme", "ops", eid, Cutoff(position=2**62), use_snapshots=False)
    assert unseeded.state.checksum() == full[cuts[-1]]["checksum"]
    final = full[cuts[-1]]["state"]["execution"][0]
    assert final["status"] == "completed" and final["steps_ended"] == 50


def _position(plane: ControlPlane, event: EventEnvelope) -> int:
    with plane.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT position FROM event WHERE event_id = :id"), {"id": int(event.event_id)}
            ).scalar_one()
        )


def test_as_of_time_folds_what_was_stored_by_then(rclient: FlaskClient, rplane: ControlPlane) -> None:
    eid, events = _run_chain(rclient, rplane, 3)
    middle = events[len(events) // 2].ingest_time
    assert middle is not None
    answer = _state(rclient, eid, as_of_time=middle.isoformat()).get_json()
    stored = [e for e in events if e.ingest_time is not None and e.ingest_time <= middle]
    assert answer["event_count"] == len(stored) < len(events)
    assert answer["checksum"] == _independent_fold(stored).checksum()


def test_projection_really_filters_and_payloads_resolve_to_a_bounded_summary(
    rclient: FlaskClient, rplane: ControlPlane
) -> None:
    eid, _events = _run_chain(rclient, rplane, 2)
    everything = _state(rclient, eid, as_of_position=2**40).get_json()
    assert set(everything["state"]) == set(SURFACES) == set(everything["projection_checksums"])
    only = _state(rclient, eid, as_of_position=2**40, projection="commands", resolve_payloads="true").get_json()
    assert list(only["state"]) == ["commands"] and list(only["projection_checksums"]) == ["commands"]
    assert only["projection_checksums"]["commands"] == everything["projection_checksums"]["commands"]
    assert only["checksum"] != everything["checksum"]
    assert only["payloads"]["checked"] == 0 and only["payloads"]["problems"] == []
    assert (only["checksum_algorithm"], only["upcaster_registry_digest"]) == ("sha256", default_registry().digest)


def test_cutoffs_scope_and_projection_are_validated_with_stable_codes(
    rclient: FlaskClient, rplane: ControlPlane
) -> None:
    eid, events = _run_chain(rclient, rplane, 1)

    def code(response: Any) -> tuple[int, str]:
        return response.status_code, response.get_json()["error"]["code"]

    assert code(_state(rclient, eid)) == (400, "invalid_cutoff")
    assert code(_state(rclient, eid, as_of_position=3, as_of_event_id=events[0].event_id)) == (400, "invalid_cutoff")
    assert code(_state(rclient, eid, as_of_position=3, projection="nope")) == (400, "invalid_projection")
    assert code(_state(rclient, eid, as_of_time="yesterday")) == (400, "invalid_parameter")
    missing = rclient.get("/api/replay/state", query_string={"execution_id": eid, "as_of_position": 3})
    assert code(missing) == (400, "missing_parameter")
    assert code(_state(rclient, eid, as_of_event_id="12345")) == (404, "event_not_found")
    assert code(_state(rclient, "4242", as_of_position=1)) == (404, "execution_not_found")


def test_a_replay_request_for_another_tenants_execution_returns_nothing_of_it(
    rclient: FlaskClient, rplane: ControlPlane
) -> None:
    eid, events = _run_chain(rclient, rplane, 2)
    ours = _state(rclient, eid, as_of_position=2**40)
    assert ours.status_code == 200 and ours.get_json()["event_count"] == len(events)
    for tenant, org in (("other", "ops"), ("acme", "other"), ("other", "other")):
        for params in ({"as_of_position": 2**40}, {"as_of_event_id": events[-1].event_id}):
            theirs = rclient.get(
                "/api/replay/state",
                query_string={"tenant_id": tenant, "organization_id": org, "execution_id": eid, **params},
            )
            assert theirs.status_code == 404  # exactly as for an execution that does not exist
            assert theirs.get_json() == {"error": {"code": "execution_not_found", "message": f"no execution {eid}"}}
        verify = rclient.get(
            "/api/replay/verify", query_string={"tenant_id": tenant, "organization_id": org, "execution_id": eid}
        )
        assert verify.status_code == 404
