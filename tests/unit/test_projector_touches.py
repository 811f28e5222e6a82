"""The projector loads and writes only the surfaces a batch of events touches
(``reducers.touches``): every event of the golden corpus changes nothing outside them, and folding a
batch onto only its touched surfaces gives the same rows as folding it onto the whole state."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from noetl_cloud.replay import SURFACES, fold
from noetl_cloud.replay.reducers import apply, touches
from noetl_cloud.replay.state import LINEAGE, ReplayState
from tests.unit.test_replay_golden import corpus_registry

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
CORPUS = json.loads((DATA / "corpus.json").read_text())["executions"]


def _kinds(state: ReplayState) -> dict[str, object]:
    return {**{name: state.rows(name) for name in SURFACES}, LINEAGE: state.lineage()}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_event_changes_only_the_surfaces_it_touches(name: str) -> None:
    registry = corpus_registry()
    state = ReplayState()
    changed_somewhere = 0
    for raw in CORPUS[name]:
        event = registry.upcast(raw)
        before = copy.deepcopy(_kinds(state))
        apply(state, event)
        after = _kinds(state)
        changed = {kind for kind in after if after[kind] != before[kind]}
        assert changed <= touches(event), (event["event_type"], changed - touches(event))
        changed_somewhere += bool(changed)
    assert changed_somewhere > 0  # the corpus exercises the reducers


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_batch_folded_onto_its_touched_surfaces_alone_writes_the_same_rows(name: str) -> None:
    registry = corpus_registry()
    events = [registry.upcast(e) for e in CORPUS[name]]
    for cut in range(1, len(events)):
        head, batch = events[:cut], events[cut : cut + 5]
        whole = fold(batch, registry, fold(head, registry))
        kinds: set[str] = set().union(*(touches(e) for e in batch))
        seeded = fold(head, registry).to_dict()
        partial = ReplayState.from_parts(
            {s: rows for s, rows in seeded["surfaces"].items() if s in kinds},
            seeded["payload_refs"] if LINEAGE in kinds else [],
            event_count=seeded["event_count"],
            last_event_id=seeded["last_event_id"],
            last_position=seeded["last_position"],
        )
        fold(batch, registry, partial)
        for kind in kinds:
            rows = partial.lineage() if kind == LINEAGE else partial.rows(kind)
            expected = whole.lineage() if kind == LINEAGE else whole.rows(kind)
            assert rows == expected, (cut, kind)
        assert (partial.event_count, partial.last_position) == (whole.event_count, whole.last_position)
