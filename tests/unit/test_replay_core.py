"""The pure replay core: upcasters, checksums, snapshot selection, cutoff and projection parsing."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from werkzeug.datastructures import MultiDict

from noetl_cloud.errors import BadRequest
from noetl_cloud.replay import REDUCER_VERSION, SURFACES, ReplayState, fold
from noetl_cloud.replay.api import parse_cutoff, parse_projection
from noetl_cloud.replay.payloads import MemoryPayloads, summarize
from noetl_cloud.replay.snapshots import capture, choose
from noetl_cloud.replay.upcasters import Event, UpcasterError, UpcasterRegistry, default_registry

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "replay" / "corpus.json").read_text())["executions"]
EVENTS = CORPUS["loop_parallel"]


def lift(event: Event) -> Event:
    return {**event, "schema_version": event["schema_version"] + 1, "payload": {**event["payload"], "lifted": True}}


def same_version(event: Event) -> Event:
    return event


def other_schema(event: Event) -> Event:
    return {**event, "schema_name": "noetl.other", "schema_version": 9}


def mutate_in_place(event: Event) -> Event:
    event["payload"]["mutated"] = True
    event["schema_version"] = 2
    return event


# -- upcasters ----------------------------------------------------------------------------------------


def test_an_upcaster_lifts_an_event_and_chains_until_no_upcaster_applies() -> None:
    registry = UpcasterRegistry()
    registry.register("noetl.step.started", 1, lift)
    registry.register("noetl.step.started", 2, lift)
    event = next(e for e in EVENTS if e["event_type"] == "step.started")
    lifted = registry.upcast(event)
    assert lifted["schema_version"] == 3 and lifted["payload"]["lifted"] is True
    assert registry.upcast({**event, "schema_name": "noetl.other"})["schema_version"] == 1


def test_an_upcaster_must_advance_the_version_of_the_same_schema() -> None:
    event = EVENTS[0]
    for bad in (same_version, other_schema):
        registry = UpcasterRegistry()
        registry.register(event["schema_name"], 1, bad)
        with pytest.raises(UpcasterError):
            registry.upcast(event)


def test_an_upcaster_never_changes_the_callers_event() -> None:
    registry = UpcasterRegistry()
    event = EVENTS[0]
    before = copy.deepcopy(event)
    registry.register(event["schema_name"], 1, mutate_in_place)
    assert registry.upcast(event)["payload"]["mutated"] is True
    assert event == before


def test_the_registry_digest_is_deterministic_and_names_its_transitions() -> None:
    a, b = UpcasterRegistry(), UpcasterRegistry()
    a.register("noetl.x", 1, lift)
    a.register("noetl.y", 1, lift)
    b.register("noetl.y", 1, lift)
    b.register("noetl.x", 1, lift)
    assert a.digest == b.digest != default_registry().digest
    c = UpcasterRegistry()
    c.register("noetl.x", 1, lift)
    c.register("noetl.y", 2, lift)
    assert c.digest != a.digest
    assert default_registry().digest == UpcasterRegistry().digest  # empty today, and stable
    with pytest.raises(ValueError):
        a.register("noetl.x", 1, lift)


# -- checksums -------------------------------------------------------------------------------------------


def test_checksums_do_not_depend_on_the_order_rows_were_added() -> None:
    state = fold(EVENTS, default_registry())
    shuffled = ReplayState()
    for name in SURFACES:
        rows = list(state.surfaces[name].items())
        random.Random(5).shuffle(rows)
        shuffled.surfaces[name] = dict(rows)
    assert shuffled.surface_checksums() == state.surface_checksums()
    assert state.checksum() == state.checksum(SURFACES) != state.checksum(("commands",))
    assert ReplayState.from_dict(json.loads(json.dumps(state.to_dict()))).checksum() == state.checksum()


# -- snapshots -------------------------------------------------------------------------------------------


def _snapshots(events: list[Event], every: int, digest: str) -> list:
    taken = []
    fold(
        events,
        default_registry(),
        snapshot_every=every,
        on_snapshot=lambda s: taken.append(
            capture(
                s,
                tenant_id="acme",
                organization_id="ops",
                execution_id="1",
                registry_digest=digest,
                reducer_version=REDUCER_VERSION,
            )
        ),
    )
    return taken


def test_a_fold_seeded_from_the_newest_snapshot_before_each_cutoff_equals_a_full_fold() -> None:
    digest = default_registry().digest
    snaps = _snapshots(EVENTS, 7, digest)
    assert [s.event_count for s in snaps] == list(range(7, len(EVENTS) + 1, 7))
    for cut in range(len(EVENTS) + 1):
        position = EVENTS[cut - 1]["position"] if cut else 0
        seed = choose(snaps, cutoff_position=position, registry_digest=digest, reducer_version=REDUCER_VERSION)
        state = seed.replay_state() if seed else ReplayState()
        rest = [e for e in EVENTS if state.last_position < e["position"] <= position]
        seeded = fold(rest, default_registry(), state)
        assert seeded.checksum() == fold(EVENTS[:cut], default_registry()).checksum()
        assert seed is None or seed.position <= position


def test_snapshots_of_another_digest_reducer_version_or_that_no_longer_verify_are_ignored() -> None:
    digest = default_registry().digest
    snaps = _snapshots(EVENTS, 10, digest)
    tip = EVENTS[-1]["position"]
    newest = choose(snaps, cutoff_position=tip, registry_digest=digest, reducer_version=REDUCER_VERSION)
    assert newest is snaps[-1]
    assert choose(snaps, cutoff_position=tip, registry_digest="other", reducer_version=REDUCER_VERSION) is None
    assert choose(snaps, cutoff_position=tip, registry_digest=digest, reducer_version=REDUCER_VERSION + 1) is None
    tampered = copy.deepcopy(snaps[-1].state)
    tampered["surfaces"]["execution"][0]["status"] = "forged"
    forged = type(snaps[-1])(**{**snaps[-1].__dict__, "state": tampered})
    chosen = choose([*snaps[:-1], forged], cutoff_position=tip, registry_digest=digest, reducer_version=REDUCER_VERSION)
    assert chosen is snaps[-2]


# -- request parsing and payload summaries ---------------------------------------------------------------


def test_exactly_one_cutoff_is_accepted() -> None:
    assert parse_cutoff(MultiDict({"as_of_position": "12"})).position == 12
    assert parse_cutoff(MultiDict({"as_of_event_id": "99"})).event_id == 99
    assert parse_cutoff(MultiDict({"as_of_time": "2026-11-23T10:00:00Z"})).time is not None
    for bad in ({}, {"as_of_position": "1", "as_of_event_id": "2"}, {"as_of_position": "-1"}, {"as_of_time": "soon"}):
        with pytest.raises(BadRequest):
            parse_cutoff(MultiDict(bad))


def test_projection_names_select_surfaces() -> None:
    assert parse_projection(None) == SURFACES
    assert parse_projection("frame") == ("frames",) and parse_projection("loops") == ("loops",)
    with pytest.raises(BadRequest) as raised:
        parse_projection("everything")
    assert raised.value.code == "invalid_projection"


def test_the_payload_summary_counts_each_verdict_and_never_carries_bodies() -> None:
    store = MemoryPayloads()
    good = store.put("noetl://p/good", b"rows")
    store.put("noetl://p/changed", b"other bytes")
    refs = [
        {"uri": "noetl://p/good", "sha256": good},
        {"uri": "noetl://p/changed", "sha256": good},
        {"uri": "noetl://p/gone", "sha256": good},
        {"uri": "noetl://p/nosum", "sha256": None},
    ]
    summary = summarize(refs, store)
    assert {k: summary[k] for k in ("checked", "ok", "mismatched", "missing", "unverifiable")} == {
        "checked": 4,
        "ok": 1,
        "mismatched": 1,
        "missing": 1,
        "unverifiable": 1,
    }
    assert "rows" not in json.dumps(summary)
    assert summarize(refs, None)["unverifiable"] == 4
