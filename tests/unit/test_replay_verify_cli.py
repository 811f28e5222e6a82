"""``noetl-cloud replay verify --wait``: while the projector is behind, the command says so (once per
change), then prints the report; fake API, clock and sleep, no timing."""

from __future__ import annotations

from typing import Any

from noetl_cloud.replay.operator import verify


class Answers:
    """``api.get(...).raise_for_error().json`` over a list of reports, one per call."""

    def __init__(self, *reports: dict[str, Any]) -> None:
        self.reports = list(reports)
        self.json: dict[str, Any] = {}

    def get(self, path: str) -> Answers:
        assert path.startswith("/api/replay/verify?")
        self.json = self.reports.pop(0)
        return self

    def raise_for_error(self) -> Answers:
        return self


def test_waiting_for_a_lagging_projector_shows_progress_then_the_report() -> None:
    api = Answers(
        {"ok": False, "events_behind": 4, "drift": ["frames"]},
        {"ok": False, "events_behind": 4, "drift": ["frames"]},
        {"ok": False, "events_behind": 1, "drift": ["frames"]},
        {"ok": True, "events_behind": 0, "drift": []},
    )
    now = [0.0]
    out: list[str] = []
    said: list[str] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    code = verify(
        api,  # type: ignore[arg-type]
        tenant_id="default",
        organization_id="default",
        execution_id="1",
        wait_s=30,
        out=out.append,
        err=said.append,
        sleep=sleep,
        clock=lambda: now[0],
        progress=said.append,
    )
    assert code == 0 and '"ok": true' in out[0]
    assert said == [
        "the projection is 4 events behind; waiting up to 30 s more",
        "the projection is 1 events behind; waiting up to 29 s more",
    ]


def test_without_wait_nothing_is_said_before_the_drift() -> None:
    said: list[str] = []
    code = verify(
        Answers({"ok": False, "events_behind": 2, "drift": ["frames"]}),  # type: ignore[arg-type]
        tenant_id="default",
        organization_id="default",
        execution_id="1",
        out=lambda _line: None,
        err=said.append,
        progress=said.append,
    )
    assert code == 1
    assert said == ["noetl-cloud: replay drift in execution 1: frames (the projection is 2 events behind)"]
