"""The settle's mirror rows as bundles (``eventlog/bundles.py``) and what the projector reads from a
push (``projector/deliveries.py``): pure functions, no Pub/Sub."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from noetl_cloud.eventlog.bundles import bundled
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.projector.deliveries import Delivery, InvalidNotification, deliveries_of, fold_each
from noetl_cloud.projector.service import Applied

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def row(outbox_id: int, execution: str, topic: str = "noetl-events", **attributes: str) -> OutboxRow:
    data = {"event_id": str(outbox_id * 10), "execution_id": execution, "events": 3}
    return OutboxRow(outbox_id, topic, data, {"event_type": "step.done", **attributes}, ordering_key=execution)


def test_one_settle_of_one_topic_is_one_bundle_naming_every_execution_in_outbox_order() -> None:
    covered: dict[int, list[int]] = {5: [4]}  # row 5 already covers an earlier row of its execution
    out = bundled([row(7, "c"), row(5, "a", **TRACE), row(6, "b")], covered)
    assert len(out) == 1
    bundle = out[0]
    assert (bundle.outbox_id, bundle.topic, bundle.ordering_key) == (5, "noetl-events", None)
    assert bundle.attributes == {"deliveries": "3"}
    assert [d["execution_id"] for d in bundle.data["deliveries"]] == ["a", "b", "c"]
    assert bundle.data["deliveries"][0]["trace"] == TRACE and "trace" not in bundle.data["deliveries"][1]
    assert sorted(covered[5]) == [4, 6, 7]  # deleted with the bundle when it is published


def test_a_lone_row_goes_out_as_it_is_and_topics_are_never_mixed() -> None:
    lone, other_a, other_b = row(1, "a"), row(2, "b", topic="t2"), row(3, "c", topic="t2")
    covered: dict[int, list[int]] = {}
    out = bundled([lone, other_a, other_b], covered)
    assert out[0] is lone
    assert (out[1].topic, out[1].data["deliveries"][1]["execution_id"]) == ("t2", "c")
    assert covered == {2: [3]}


def test_bundles_hold_at_most_the_limit() -> None:
    covered: dict[int, list[int]] = {}
    out = bundled([row(i, f"e{i}") for i in range(1, 8)], covered, limit=3)
    assert [len(b.data.get("deliveries", [b.data])) for b in out] == [3, 3, 1]
    assert covered == {1: [2, 3], 4: [5, 6]}


def test_the_projector_reads_a_bundle_and_a_single_message_alike() -> None:
    bundle = bundled([row(1, "a", **TRACE), row(2, "b")], {})[0]
    assert deliveries_of(bundle.data, bundle.attributes) == [Delivery(10, TRACE), Delivery(20, {})]
    assert deliveries_of({"event_id": "30", "execution_id": "c"}, TRACE) == [Delivery(30, TRACE)]
    assert deliveries_of(None, {"event_id": "40"}) == [Delivery(40, {"event_id": "40"})]


@pytest.mark.parametrize(
    "data",
    [
        {"deliveries": []},
        {"deliveries": "12"},
        {"deliveries": [{"event_id": "1"}, {"event_id": "x"}]},
        {"deliveries": [{"event_id": "1"}] * 1001},
        {"deliveries": [7]},
        {"execution_id": "1"},
    ],
)
def test_a_message_that_names_no_foldable_event_is_invalid(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidNotification):
        deliveries_of(data, {})


def test_a_bundle_is_answered_after_every_fold_and_one_failure_fails_the_push() -> None:
    folded: list[int] = []

    def handle(event_id: int) -> Applied:
        if event_id == 99:
            raise RuntimeError("database unavailable")
        folded.append(event_id)
        return Applied("applied", str(event_id))

    with ThreadPoolExecutor(2) as folds:
        answer = fold_each([Delivery(1), Delivery(2), Delivery(3)], handle, folds)
        assert answer["deliveries"] == 3 and [r["event_id"] for r in answer["results"]] == ["1", "2", "3"]
        assert sorted(folded) == [1, 2, 3]
        with pytest.raises(RuntimeError):
            fold_each([Delivery(4), Delivery(99)], handle, folds)
