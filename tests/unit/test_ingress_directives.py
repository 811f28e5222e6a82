from __future__ import annotations

from typing import Any

import pytest

from noetl_cloud.ingress.directives import (
    VerifiedMessage,
    filter_baggage,
    last_value,
    normalize_headers,
    plan_dispatch,
    seal_trusted_pull,
    seal_verified,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

SUBSCRIPTION: dict[str, Any] = {
    "dispatch": {"playbook": "domain/handle_event", "execution_pool": "shared"},
    "headers": {
        "directives": [
            {
                "header": "x-noetl-route",
                "controls": "dispatch.playbook",
                "allowed": ["domain/handle_billing", "domain/handle_fraud", "domain/handle_event"],
            },
            {"header": "x-noetl-pool", "controls": "dispatch.execution_pool", "allowed": ["priority", "shared"]},
            {"header": "x-priority", "controls": "priority", "map": {"high": "priority", "normal": "shared"}},
            {"header": "x-idempotency-key", "controls": "idempotency_key"},
            {"header": "content-type", "controls": "content_type"},
        ],
        "trace": {"propagate": "w3c", "baggage_allowlist": ["tenant", "request_id"]},
    },
    "dedup": {"enabled": False, "window_secs": 600},
}


def message(**headers: str | list[str]) -> VerifiedMessage:
    return seal_verified("m-1", "webhook", {k.lower(): v for k, v in headers.items()}, "shared-secret")


def test_normalization_lowercases_arrays_repeats_and_drops_credentials() -> None:
    headers = normalize_headers(
        [("X-Noetl-Pool", "shared"), ("x-noetl-pool", "priority"), ("Authorization", "Bearer t"), ("A", "1")],
        drop=frozenset({"authorization"}),
    )
    assert headers == {"x-noetl-pool": ["shared", "priority"], "a": "1"}
    assert last_value(headers["x-noetl-pool"]) == "priority"


def test_no_directive_headers_means_the_subscription_defaults() -> None:
    plan = plan_dispatch(message(), SUBSCRIPTION)
    assert (plan.playbook, plan.execution_pool, plan.trace, plan.dedup) == ("domain/handle_event", "shared", None, None)
    assert plan.applied == () and not plan.route_override


def test_allowlisted_redirect_and_pool_are_applied_and_recorded() -> None:
    plan = plan_dispatch(message(**{"x-noetl-route": "domain/handle_fraud", "x-noetl-pool": "priority"}), SUBSCRIPTION)
    assert (plan.playbook, plan.execution_pool, plan.route_override) == ("domain/handle_fraud", "priority", True)
    assert [(a.header, a.controls, a.effective_value) for a in plan.applied] == [
        ("x-noetl-route", "dispatch.playbook", "domain/handle_fraud"),
        ("x-noetl-pool", "dispatch.execution_pool", "priority"),
    ]
    audit = plan.audit("m-1")
    assert audit["route_override"] and audit["applied"][0]["effective_value"] == "domain/handle_fraud"


def test_values_outside_the_allowlist_are_ignored_and_recorded_never_honoured() -> None:
    plan = plan_dispatch(
        message(**{"x-noetl-route": "domain/steal_secrets", "x-noetl-pool": "gpu", "x-priority": "urgent"}),
        SUBSCRIPTION,
    )
    assert (plan.playbook, plan.execution_pool) == ("domain/handle_event", "shared")
    assert [(i.header, i.reason) for i in plan.ignored] == [
        ("x-noetl-route", "not_allowed"),
        ("x-noetl-pool", "not_allowed"),
        ("x-priority", "not_mapped"),
    ]


def test_headers_outside_the_allowlist_never_act() -> None:
    plan = plan_dispatch(
        message(**{"x-noetl-playbook": "domain/handle_fraud", "x-execution-pool": "priority"}), SUBSCRIPTION
    )
    assert (plan.playbook, plan.execution_pool, plan.applied) == ("domain/handle_event", "shared", ())


def test_explicit_pool_beats_priority_which_beats_the_default() -> None:
    assert plan_dispatch(message(**{"x-priority": "high"}), SUBSCRIPTION).execution_pool == "priority"
    both = plan_dispatch(message(**{"x-priority": "high", "x-noetl-pool": "shared"}), SUBSCRIPTION)
    assert both.execution_pool == "shared"


def test_last_value_wins_for_a_repeated_directive() -> None:
    plan = plan_dispatch(message(**{"x-noetl-pool": ["priority", "shared"]}), SUBSCRIPTION)
    assert plan.execution_pool == "shared"


@pytest.mark.parametrize("joiner", [",", ", "])
def test_last_value_wins_for_a_repeated_header_an_http_server_folded_into_one(joiner: str) -> None:
    folded = {
        "x-noetl-route": joiner.join(["domain/handle_billing", "domain/handle_fraud"]),
        "x-noetl-pool": joiner.join(["shared", "priority"]),
        "x-priority": joiner.join(["normal", "high"]),
    }
    plan = plan_dispatch(message(**folded), SUBSCRIPTION)
    assert (plan.playbook, plan.execution_pool, plan.ignored) == ("domain/handle_fraud", "priority", ())
    assert plan_dispatch(message(**{"x-priority": joiner.join(["high", "normal"])}), SUBSCRIPTION).execution_pool == (
        "shared"
    )
    outside = plan_dispatch(message(**{"x-noetl-route": joiner.join(["domain/handle_fraud", "x/y"])}), SUBSCRIPTION)
    assert outside.playbook == "domain/handle_event" and outside.ignored[0].reason == "not_allowed"


def test_idempotency_key_feeds_dedup_and_message_id_is_the_fallback() -> None:
    keyed = plan_dispatch(message(**{"x-idempotency-key": "order-42"}), SUBSCRIPTION)
    assert keyed.dedup == {"key": "order-42", "window_secs": 600}
    enabled = {**SUBSCRIPTION, "dedup": {"enabled": True, "window_secs": 60}}
    assert plan_dispatch(message(), enabled).dedup == {"key": "m-1", "window_secs": 60}
    assert plan_dispatch(message(**{"x-idempotency-key": "k"}), enabled).dedup == {"key": "k", "window_secs": 60}
    too_long = plan_dispatch(message(**{"x-idempotency-key": "k" * 600}), SUBSCRIPTION)
    assert too_long.dedup is None and too_long.ignored[0].reason == "too_long"


def test_trace_is_propagated_with_filtered_baggage() -> None:
    plan = plan_dispatch(
        message(traceparent=TRACEPARENT, tracestate="v=1", baggage="tenant=acme,secret=x, request_id=r1;p=1"),
        SUBSCRIPTION,
    )
    assert plan.trace == {"traceparent": TRACEPARENT, "tracestate": "v=1", "baggage": "tenant=acme,request_id=r1;p=1"}


def test_a_malformed_traceparent_is_dropped_and_tracestate_kept() -> None:
    plan = plan_dispatch(message(traceparent="00-zz-00-01", tracestate="v=1"), SUBSCRIPTION)
    assert plan.trace == {"tracestate": "v=1"}
    assert ("traceparent", "malformed") in [(i.header, i.reason) for i in plan.ignored]


def test_trace_is_not_honoured_unless_the_subscription_propagates_it() -> None:
    off = {**SUBSCRIPTION, "headers": {**SUBSCRIPTION["headers"], "trace": {"propagate": "none"}}}
    assert plan_dispatch(message(traceparent=TRACEPARENT), off).trace is None


def test_hints_pass_through() -> None:
    plan = plan_dispatch(message(**{"content-type": "application/json"}), SUBSCRIPTION)
    assert plan.content_type == "application/json"


def test_only_a_verified_message_can_be_planned() -> None:
    with pytest.raises(TypeError):
        VerifiedMessage("m", "webhook", {}, "anyone", object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        plan_dispatch({"message_id": "m", "headers": {"x-noetl-route": "x"}}, SUBSCRIPTION)  # type: ignore[arg-type]
    assert (
        plan_dispatch(seal_trusted_pull("m", "pubsub", {"x-noetl-pool": "priority"}), SUBSCRIPTION).execution_pool
        == "priority"
    )


def test_filter_baggage() -> None:
    assert filter_baggage("a=1,b=2", ["b"]) == "b=2"
    assert filter_baggage("a=1", []) is None and filter_baggage(None, ["a"]) is None
