"""The spool's pure decisions (RFC §8.2-§8.3): modes, lanes, retention, drain order, interleave."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from noetl_cloud.spec.spool import Retention
from noetl_cloud.spool.item import lane_segment
from noetl_cloud.spool.policy import (
    ANY_LANE,
    GLOBAL_LANE,
    MAX_LANE_CHARS,
    NOKEY_LANE,
    POISON,
    SPOOL_ALERT_EVENT,
    Admit,
    Full,
    drain_order,
    expired,
    is_poison,
    lane_of,
    may_interleave,
    on_downstream_failure,
    retention_decision,
    source_kind,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class It:
    name: str
    recv_seq: int
    attempts: int = 0


# -- modes -----------------------------------------------------------------------------------------


def test_mode_off_stops_acking_for_pull_and_push_sources() -> None:
    assert on_downstream_failure("off", "pull", NOW - timedelta(hours=5), NOW, 0) == "stop_acking"
    assert on_downstream_failure("off", "push", NOW - timedelta(hours=5), NOW, 0) == "stop_acking"


def test_buffer_and_ack_spools_from_the_first_failure() -> None:
    assert on_downstream_failure("buffer_and_ack", "pull", NOW, NOW, 60_000) == "spool"


def test_hybrid_stops_acking_until_the_outage_lasted_the_escalation_time_then_spools() -> None:
    assert on_downstream_failure("hybrid", "pull", NOW - timedelta(milliseconds=59_999), NOW, 60_000) == "stop_acking"
    assert on_downstream_failure("hybrid", "pull", NOW - timedelta(milliseconds=60_000), NOW, 60_000) == "spool"


def test_hybrid_with_an_unknown_outage_start_counts_it_as_just_begun() -> None:
    assert on_downstream_failure("hybrid", "pull", None, NOW, 60_000) == "stop_acking"
    assert on_downstream_failure("hybrid", "pull", None, NOW, 0) == "spool"


def test_push_sources_always_spool_when_the_mode_is_not_off() -> None:
    assert on_downstream_failure("hybrid", "push", NOW, NOW, 60_000) == "spool"
    assert on_downstream_failure("buffer_and_ack", "push", NOW, NOW, 60_000) == "spool"


def test_webhooks_and_pubsub_push_routes_are_push_sources_pull_sources_are_not() -> None:
    assert source_kind("webhook", "push") == "push"
    assert source_kind("pubsub", "push") == "push"
    assert source_kind("pubsub", "pull") == "pull"
    assert source_kind("kafka", "pull") == "pull"


# -- lanes -----------------------------------------------------------------------------------------


def test_global_and_none_orderings_have_one_fixed_lane_whatever_the_key() -> None:
    assert lane_of("global", "device-1") == GLOBAL_LANE == "_global"
    assert lane_of("none", "device-1") == ANY_LANE == "_any"


def test_per_key_without_a_key_value_goes_to_the_nokey_lane() -> None:
    assert lane_of("per_key", None) == NOKEY_LANE == "_nokey"
    assert lane_of("per_key", "") == NOKEY_LANE


def test_per_key_lane_is_readable_for_simple_keys_and_stable() -> None:
    assert lane_of("per_key", "device-42") == "k-device-42"
    assert lane_of("per_key", "device-42") == lane_of("per_key", "device-42")


@pytest.mark.parametrize(
    "value", ["a/b", "../etc", ".", "dlq", "x y", "ünï", "%41", "_global", "_nokey", "~", "a" * 500, 7, 3.5, True]
)
def test_per_key_lanes_are_name_safe_bounded_and_never_meet_a_fixed_lane(value: object) -> None:
    lane = lane_of("per_key", value)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", lane)
    assert len(lane) <= MAX_LANE_CHARS
    assert not lane.startswith("_")
    assert lane_segment(lane) == lane  # the spool's object names keep it as it is


def test_per_key_lanes_of_different_keys_differ() -> None:
    values = ["a/b", "a_b", "a-b", "A-B", "a" * 500, "a" * 501, "x y", "x+y"]
    assert len({lane_of("per_key", v) for v in values}) == len(values)


def test_unknown_ordering_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown ordering"):
        lane_of("sorted", "x")  # type: ignore[arg-type]


# -- retention -------------------------------------------------------------------------------------


def test_an_item_that_fits_under_max_bytes_is_admitted() -> None:
    decision = retention_decision(3, 900, 100, NOW, NOW, Retention(max_bytes=1000))
    assert decision == Admit(sweep_due=False)
    assert decision.admits


@pytest.mark.parametrize(
    ("on_full", "admits", "event"),
    [("stop_acking", False, None), ("drop_to_dlq", False, None), ("alert_only", True, SPOOL_ALERT_EVENT)],
)
def test_an_item_past_max_bytes_gets_the_on_full_action(on_full: str, admits: bool, event: str | None) -> None:
    decision = retention_decision(3, 901, 100, NOW, NOW, Retention(max_bytes=1000, on_full=on_full))  # type: ignore[arg-type]
    assert isinstance(decision, Full)
    assert decision.action == on_full
    assert decision.admits is admits
    assert decision.event == event
    assert (decision.count, decision.bytes_used, decision.max_bytes) == (3, 901, 1000)


def test_an_item_bigger_than_the_whole_ceiling_never_fits() -> None:
    assert isinstance(retention_decision(0, 0, 1001, None, NOW, Retention(max_bytes=1000)), Full)


def test_an_expired_oldest_item_asks_for_a_sweep_without_refusing() -> None:
    old = NOW - timedelta(hours=72)
    assert retention_decision(1, 10, 10, old, NOW, Retention(max_age_hours=72)) == Admit(sweep_due=True)


def test_items_expire_at_max_age_hours() -> None:
    assert not expired(NOW - timedelta(hours=2) + timedelta(microseconds=1), NOW, 2)
    assert expired(NOW - timedelta(hours=2), NOW, 2)


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        retention_decision(0, -1, 1, None, NOW, Retention())


# -- drain -----------------------------------------------------------------------------------------


def _names(steps: object) -> list[tuple[str, str]]:
    return [(step.action, step.item.name) for step in steps]  # type: ignore[attr-defined]


def test_poison_is_reached_at_max_replay_attempts() -> None:
    assert not is_poison(9, 10)
    assert is_poison(10, 10)


def test_global_drain_is_one_sequential_lane_in_receive_order() -> None:
    plan = drain_order({GLOBAL_LANE: [It("c", 3), It("a", 1), It("b", 2)]}, "global", 10)
    assert plan.sequential
    assert [lp.lane for lp in plan.lanes] == [GLOBAL_LANE]
    assert _names(plan.lanes[0].steps) == [("replay", "a"), ("replay", "b"), ("replay", "c")]


def test_global_drain_dead_letters_a_poison_item_and_stops_the_lane_behind_it() -> None:
    plan = drain_order({GLOBAL_LANE: [It("a", 1), It("p", 2, attempts=10), It("c", 3)]}, "global", 10)
    assert _names(plan.lanes[0].steps) == [("replay", "a"), ("dead_letter", "p")]
    assert plan.lanes[0].steps[-1].reason == POISON
    assert plan.halted_lanes == (GLOBAL_LANE,)


def test_global_drain_merges_lanes_by_receive_order_and_keeps_each_items_lane() -> None:
    plan = drain_order({"x": [It("b", 2)], "y": [It("a", 1)]}, "global", 10)
    assert [(s.lane, s.item.name) for s in plan.lanes[0].steps] == [("y", "a"), ("x", "b")]


def test_per_key_drain_dead_letters_poison_and_the_lane_behind_it_continues() -> None:
    plan = drain_order({"k-a": [It("a2", 4), It("a1", 1, attempts=3)], "k-b": [It("b1", 2), It("b2", 3)]}, "per_key", 3)
    assert not plan.sequential
    assert plan.halted_lanes == ()
    by_lane = {lp.lane: _names(lp.steps) for lp in plan.lanes}
    assert by_lane == {
        "k-a": [("dead_letter", "a1"), ("replay", "a2")],
        "k-b": [("replay", "b1"), ("replay", "b2")],
    }


def test_per_key_interleaved_order_is_round_robin_and_keeps_each_lanes_order() -> None:
    plan = drain_order({"k-a": [It("a1", 1), It("a2", 2), It("a3", 3)], "k-b": [It("b1", 9)]}, "per_key", 10)
    assert [s.item.name for s in plan.interleaved()] == ["a1", "b1", "a2", "a3"]


def test_none_ordering_drain_continues_past_poison() -> None:
    plan = drain_order({ANY_LANE: [It("p", 1, attempts=5), It("b", 2)]}, "none", 5)
    assert _names(plan.lanes[0].steps) == [("dead_letter", "p"), ("replay", "b")]
    assert plan.halted_lanes == ()


def test_an_empty_spool_plans_nothing() -> None:
    assert drain_order({}, "global", 3).lanes == ()
    assert drain_order({"k-a": []}, "per_key", 3).lanes == ()


def test_max_replay_attempts_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        drain_order({}, "global", 0)


# -- interleave ------------------------------------------------------------------------------------


def test_interleave_is_refused_under_global_ordering() -> None:
    assert not may_interleave("interleave", "global")


def test_interleave_is_allowed_under_per_key_and_none() -> None:
    assert may_interleave("interleave", "per_key")
    assert may_interleave("interleave", "none")


def test_ordered_then_live_never_interleaves() -> None:
    assert not any(may_interleave("ordered_then_live", o) for o in ("global", "per_key", "none"))  # type: ignore[arg-type]
