"""The golden replay corpus: pinned checksums for every surface of every corpus execution.

``tests/data/replay/corpus.json`` holds the events of real executions (recorded from the control
plane against PostgreSQL) and one synthetic execution with frames, stages, business objects,
payload references, a reissued command and a legacy ``frame.committed`` v1. ``expected.json`` pins,
per execution, the event count, the last event id, each surface's checksum and the overall one,
and the registry digest. A reducer, upcaster or canonical-JSON change fails here until the pins
are updated on purpose (the failure prints the new ones) and ``REDUCER_VERSION`` is bumped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.replay import REDUCER_VERSION, SURFACES, fold
from noetl_cloud.replay.state import ReplayState
from noetl_cloud.replay.upcasters import Event, UpcasterRegistry

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
CORPUS = json.loads((DATA / "corpus.json").read_text())["executions"]
EXPECTED = json.loads((DATA / "expected.json").read_text())


def frame_rows_to_row_count(event: Event) -> Event:
    """noetl.frame.committed v1 named the row count ``rows``; v2 names it ``row_count``."""
    payload = dict(event["payload"])
    payload["row_count"] = payload.pop("rows", 0)
    return {**event, "payload": payload, "schema_version": 2}


def corpus_registry() -> UpcasterRegistry:
    registry = UpcasterRegistry()
    registry.register("noetl.frame.committed", 1, frame_rows_to_row_count)
    return registry


def pins(state: ReplayState) -> dict[str, Any]:
    return {
        "event_count": state.event_count,
        "last_event_id": state.last_event_id,
        "checksum": state.checksum(),
        "projection_checksums": state.surface_checksums(),
    }


def folded(name: str) -> ReplayState:
    return fold(CORPUS[name], corpus_registry())


def test_the_corpus_registry_digest_and_reducer_version_are_pinned() -> None:
    assert corpus_registry().digest == EXPECTED["upcaster_registry_digest"]
    assert REDUCER_VERSION == EXPECTED["reducer_version"]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_surface_of_each_corpus_execution_folds_to_its_pinned_checksum(name: str) -> None:
    got = pins(folded(name))
    assert set(got["projection_checksums"]) == set(SURFACES)
    assert got == EXPECTED["executions"][name], "new pins:\n" + json.dumps({name: got}, indent=1)


def test_the_pins_cover_every_corpus_execution() -> None:
    assert set(EXPECTED["executions"]) == set(CORPUS)


def test_the_corpus_shapes_each_surface_as_the_reducers_document() -> None:
    loop = folded("loop_parallel")
    (run,) = loop.rows("loops")
    assert (run["issued"], run["completed"], run["failed"], run["in_flight"], run["status"]) == (4, 4, 0, 0, "done")
    assert loop.rows("execution")[0]["status"] == "completed"
    assert all(c["status"] == "completed" for c in loop.rows("commands"))

    synthetic = folded("frames_and_objects")
    frames = {f["id"]: f for f in synthetic.rows("frames")}
    assert (frames["701"]["status"], frames["701"]["row_count"]) == ("COMMITTED", 150)  # upcast from `rows`
    failed = frames["702"]
    assert (failed["status"], failed["attempts"], failed["parent_frame_id"]) == ("FAILED", 2, "701")
    (command,) = synthetic.rows("commands")
    assert (command["attempt"], command["reissues"], command["status"]) == (2, 1, "completed")
    assert command["task_events"] == 2
    objects = {o["id"]: o for o in synthetic.rows("business_objects")}
    assert objects["customer/c-1"]["state"] == {"name": "Ada", "tier": "platinum"}
    assert objects["customer/c-1"]["version"] == 2
    assert objects["invoice/inv-9"]["deleted"] is True
    stages = {s["id"]: s for s in synthetic.rows("stages")}
    assert stages["601"]["status"] == "FAILED" and stages["501"]["status"] == "done"
    assert {r["uri"].rsplit("/", 1)[-1] for r in synthetic.lineage()} == {"a" * 64, "1"}

    assert folded("cancelled").rows("execution")[0]["status"] == "cancelled"
    failure = folded("template_failure")  # its step.failed routes on, so the execution completes
    assert failure.rows("execution")[0]["status"] == "completed"
    assert any(s["status"] == "failed" for s in failure.rows("stages"))


def test_without_the_upcaster_the_legacy_frame_folds_differently() -> None:
    plain = fold(CORPUS["frames_and_objects"], UpcasterRegistry())
    assert plain.surface_checksums()["frames"] != folded("frames_and_objects").surface_checksums()["frames"]
