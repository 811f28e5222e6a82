from __future__ import annotations

import pytest

from noetl_cloud.engine.model import Rule, Then
from noetl_cloud.engine.policy import backoff_delay, decide
from noetl_cloud.engine.templates import Renderer, build_scope


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [("none", [2.0, 2.0, 2.0, 2.0]), ("linear", [2.0, 4.0, 6.0, 8.0]), ("exponential", [2.0, 4.0, 8.0, 16.0])],
)
def test_backoff_delays(backoff: str, expected: list[float]) -> None:
    assert [backoff_delay(backoff, 2.0, retry) for retry in range(1, 5)] == expected


def test_backoff_counts_retries_from_one() -> None:
    with pytest.raises(ValueError):
        backoff_delay("linear", 1.0, 0)


@pytest.mark.parametrize(("status", "do"), [("ok", "continue"), ("error", "fail")])
def test_defaults_without_policy(status: str, do: str) -> None:
    assert decide(None, status, build_scope(), Renderer(), step="s", task="t").do == do


def test_rules_without_match_and_without_else_continue() -> None:
    rules = (Rule(when="{{ outcome.status == 'error' }}", then=Then(do="fail")),)
    scope = build_scope(outcome={"status": "ok"})
    assert decide(rules, "ok", scope, Renderer(), step="s", task="t").do == "continue"


def test_first_matching_rule_wins_and_writes_are_rendered() -> None:
    rules = (
        Rule(when="{{ outcome.result > 5 }}", then=Then(do="break", set_iter={"big": "{{ outcome.result }}"})),
        Rule(when="{{ outcome.result > 1 }}", then=Then(do="fail")),
        Rule(when=None, then=Then(do="continue")),
    )
    decision = decide(rules, "ok", build_scope(outcome={"status": "ok", "result": 9}), Renderer(), step="s", task="t")
    assert decision.do == "break" and decision.rule_index == 0 and decision.set_iter == {"big": 9}


def test_delay_may_be_a_template() -> None:
    rules = (Rule(when=None, then=Then(do="retry", attempts=3, delay="{{ workload.d }}")),)
    decision = decide(rules, "error", build_scope(workload={"d": 1.5}), Renderer(), step="s", task="t")
    assert decision.delay == 1.5 and decision.attempts == 3
