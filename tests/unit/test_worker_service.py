"""WorkerService against the in-memory control plane: claim → run (with heartbeats) → report, the ack/nack
decision of each answer, and child playbooks started through POST /api/execute and followed to their end.

Nothing here sleeps to make a point: runs that must overlap a heartbeat wait on events the fake control
plane sets (with a generous timeout that only guards against a hang)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from noetl_cloud.engine import FakeClock, Outcome, ToolCall
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.playbook import PlaybookTool
from noetl_cloud.tools.registry import ToolRegistry, default_registry
from noetl_cloud.web.client import ApiResponse, UpstreamUnavailable
from noetl_cloud.worker.memory import UNREACHABLE, InMemoryControlPlane
from noetl_cloud.worker.service import (
    BadNotification,
    ControlPlaneRefused,
    Handled,
    Notification,
    WorkerService,
)
from tests.unit.test_worker_run import command

WORKER = "worker-shared-1"
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
GUARD_S = 10.0  # only ever reached if the code under test hangs


def note(cmd: dict[str, Any]) -> dict[str, Any]:
    return {"execution_id": cmd["execution_id"], "command_id": cmd["command_id"], "step": cmd["step"], "attempt": 1}


def playbook(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "t"}, "workflow": list(steps)}


def adhoc(*tasks: dict[str, Any], command_id: str = "3001") -> dict[str, Any]:
    """A step command whose step runs ``tasks`` (each ``{label: body}``)."""
    cmd = command("loop_parallel", "total")
    cmd["command_id"] = command_id
    cmd["playbook"] = {
        "catalog_id": None,
        "path": "t",
        "version": 1,
        "document": playbook({"step": "start", "tool": list(tasks)}),
    }
    cmd["step"] = "start"
    return cmd


class Hook:
    """``kind: hook``: calls a function with the ToolCall (to act on the control plane mid-run)."""

    kind = "hook"
    raw_fields: tuple[str, ...] = ()

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls = 0

    def run(self, call: ToolCall) -> Outcome:
        self.calls += 1
        return Outcome.ok(self.fn(call))


class Recorder:
    """``kind: rec``: counts its runs."""

    kind = "rec"
    raw_fields: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.calls = 0

    def run(self, call: ToolCall) -> Outcome:
        self.calls += 1
        return Outcome.ok(self.calls)


def service(api: InMemoryControlPlane, *tools: Any, **options: Any) -> WorkerService:
    registry = ToolRegistry([NoopTool(), PlaybookTool(), *tools])
    options.setdefault("heartbeat_s", 3600.0)
    options.setdefault("clock", FakeClock())
    return WorkerService(api, worker_id=WORKER, tools=registry, now=lambda: NOW, **options)


@pytest.fixture
def api() -> InMemoryControlPlane:
    return InMemoryControlPlane(now=lambda: NOW)


# -- the happy path ---------------------------------------------------------------------------------------------


def test_a_notified_command_is_claimed_run_and_reported(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("loop_parallel", "total", args={"squares": [1, 4, 9, 16]}))
    handled = service(api).handle(note(cmd))
    assert handled == Handled("reported", "3001", "ok")
    assert [name for name, _path, _body in api.calls] == ["claim", "events"]
    assert api.calls_to("claim") == [{"worker_id": WORKER}]
    (report,) = api.reports
    assert (report["command_id"], report["worker_id"], report["attempt"]) == ("3001", WORKER, 1)
    assert (report["status"], report["result"], report["error"], report["ctx_patch"]) == ("ok", 30, None, [])
    assert [event["event_type"] for event in report["events"]] == ["task.started", "task.done"]
    assert report["started_at"] == NOW.isoformat()
    assert api.commands["3001"]["status"] == "completed"


def test_a_failed_step_is_reported_as_an_error_and_acked(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("failure_cleanup", "start"))
    registry = default_registry()
    handled = WorkerService(api, worker_id=WORKER, tools=registry, heartbeat_s=3600).handle(note(cmd))
    assert handled == Handled("reported", "3001", "error")
    assert api.reports[0]["error"]["message"] == "ValueError: bad input"


def test_a_redelivered_notification_runs_the_command_once(api: InMemoryControlPlane) -> None:
    rec = Recorder()
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    worker = service(api, rec)
    assert worker.handle(note(cmd)).outcome == "reported"
    assert worker.handle(note(cmd)) == Handled("already_claimed", "3001")
    assert rec.calls == 1 and len(api.reports) == 1


# -- claim answers ---------------------------------------------------------------------------------------------


def test_claim_409_acks_without_running(api: InMemoryControlPlane) -> None:
    rec = Recorder()
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.post(f"/api/commands/{cmd['command_id']}/claim", {"worker_id": "someone-else"})
    assert service(api, rec).handle(note(cmd)) == Handled("already_claimed", "3001")
    assert rec.calls == 0 and api.calls_to("events") == [] and api.calls_to("heartbeat") == []


def test_a_command_of_an_ended_execution_is_acked_and_not_run(api: InMemoryControlPlane) -> None:
    rec = Recorder()
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.end_execution(cmd["execution_id"], "cancelled")
    assert service(api, rec).handle(note(cmd)) == Handled("execution_terminal", "3001")
    assert rec.calls == 0 and api.commands["3001"]["status"] == "cancelled"


def test_an_unknown_command_is_acked(api: InMemoryControlPlane) -> None:
    assert service(api).handle({"execution_id": "1", "command_id": "404"}) == Handled("not_found", "404")


@pytest.mark.parametrize("status", [UNREACHABLE, 500, 503])
def test_claim_when_the_control_plane_is_down_is_a_nack(api: InMemoryControlPlane, status: int) -> None:
    rec = Recorder()
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.fail("claim", status)
    with pytest.raises(UpstreamUnavailable) as info:
        service(api, rec).handle(note(cmd))
    assert info.value.status == 503 and info.value.retryable
    assert rec.calls == 0


def test_refused_worker_credentials_are_a_nack_not_a_dropped_command(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.fail("claim", 401)
    with pytest.raises(ControlPlaneRefused) as info:
        service(api, Recorder()).handle(note(cmd))
    assert info.value.status == 503 and info.value.code == "control_plane_refused"


def test_a_claim_refused_for_good_is_acked_as_rejected(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.fail("claim", 422)
    assert service(api, Recorder()).handle(note(cmd)) == Handled("rejected", "3001")


# -- report answers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [UNREACHABLE, 500, 502])
def test_report_when_the_control_plane_is_down_is_a_nack(api: InMemoryControlPlane, status: int) -> None:
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.fail("events", status)
    with pytest.raises(UpstreamUnavailable):
        service(api, Recorder()).handle(note(cmd))
    assert api.reports == [] and len(api.calls_to("events")) == 1


def test_report_409_lease_lost_is_acked(api: InMemoryControlPlane) -> None:
    def reaped(call: ToolCall) -> None:
        api.commands["3001"]["worker_id"] = "worker-after-reaper"

    cmd = api.add_command(adhoc({"h": {"kind": "hook"}}))
    assert service(api, Hook(reaped)).handle(note(cmd)) == Handled("lease_lost", "3001", "ok")
    assert api.reports == []


def test_a_report_for_an_already_terminal_command_is_a_duplicate_and_acked(api: InMemoryControlPlane) -> None:
    def finished_elsewhere(call: ToolCall) -> None:
        api.commands["3001"]["status"] = "completed"

    cmd = api.add_command(adhoc({"h": {"kind": "hook"}}))
    assert service(api, Hook(finished_elsewhere)).handle(note(cmd)) == Handled("duplicate", "3001", "ok")


def test_a_report_refused_for_good_is_acked_as_rejected(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(adhoc({"count": {"kind": "rec"}}))
    api.fail("events", 422)
    assert service(api, Recorder()).handle(note(cmd)) == Handled("rejected", "3001", "ok")


# -- heartbeats ------------------------------------------------------------------------------------------------


class CountingPlane(InMemoryControlPlane):
    """Sets ``beats_seen`` once ``wanted`` heartbeats were answered."""

    def __init__(self, wanted: int) -> None:
        super().__init__(now=lambda: NOW)
        self.wanted = wanted
        self.beats_seen = threading.Event()

    def post(self, path: str, json: Any = None) -> ApiResponse:
        response = super().post(path, json)
        if path.endswith("/heartbeat") and len(self.calls_to("heartbeat")) >= self.wanted:
            self.beats_seen.set()
        return response


def test_heartbeats_extend_the_lease_while_a_task_runs() -> None:
    api = CountingPlane(wanted=3)
    cmd = api.add_command(adhoc({"h": {"kind": "hook"}}))
    hook = Hook(lambda call: api.beats_seen.wait(GUARD_S))
    assert service(api, hook, heartbeat_s=0.001).handle(note(cmd)) == Handled("reported", "3001", "ok")
    assert api.reports[0]["result"] is True  # the task saw three heartbeats answered while it ran
    assert api.calls_to("heartbeat")[:3] == [{"worker_id": WORKER}] * 3


@pytest.mark.parametrize("ending", ["cancelled", "reaped"])
def test_heartbeat_409_stops_the_run_and_nothing_is_reported(api: InMemoryControlPlane, ending: str) -> None:
    def end_it(call: ToolCall) -> bool:
        if ending == "cancelled":
            api.end_execution("2001", "cancelled")
        else:
            api.commands["3001"]["worker_id"] = "worker-after-reaper"
        refused = api.heartbeat_refused.wait(GUARD_S)
        # The refusal is recorded inside the heartbeat call; the run is told to stop just after it, when
        # the heartbeat thread sees the answer and ends. Wait for that thread, not for time.
        for thread in threading.enumerate():
            if thread.name == "heartbeat-3001":
                thread.join(GUARD_S)
        return refused

    after = Recorder()
    cmd = api.add_command(adhoc({"h": {"kind": "hook"}}, {"after": {"kind": "rec"}}))
    handled = service(api, Hook(end_it), after, heartbeat_s=0.001).handle(note(cmd))
    assert handled == Handled("stopped", "3001")
    assert api.heartbeat_refused.is_set()
    assert after.calls == 0  # the run stopped before the next task attempt
    assert api.calls_to("events") == [] and api.reports == []


def test_a_failing_heartbeat_keeps_the_run_going() -> None:
    api = CountingPlane(wanted=3)
    api.fail("heartbeat", UNREACHABLE, 503)
    cmd = api.add_command(adhoc({"h": {"kind": "hook"}}))
    hook = Hook(lambda call: api.beats_seen.wait(GUARD_S))
    assert service(api, hook, heartbeat_s=0.001).handle(note(cmd)).outcome == "reported"


def test_the_heartbeat_interval_is_at_most_a_third_of_the_lease(api: InMemoryControlPlane) -> None:
    worker = service(api, heartbeat_s=10.0)
    assert worker.heartbeat_interval((NOW + timedelta(seconds=60)).isoformat()) == 10.0
    assert worker.heartbeat_interval((NOW + timedelta(seconds=6)).isoformat()) == 2.0
    assert worker.heartbeat_interval((NOW - timedelta(seconds=6)).isoformat()) == 10.0
    assert worker.heartbeat_interval(None) == 10.0
    assert worker.heartbeat_interval("not a time") == 10.0


# -- child playbooks --------------------------------------------------------------------------------------------


class Waits:
    """The injected wait of child polling: records each delay, ends the child on the n-th wait."""

    def __init__(self, api: InMemoryControlPlane, end_on: int, status: str = "completed", **end: Any) -> None:
        self.api, self.end_on, self.status, self.end = api, end_on, status, end
        self.delays: list[float] = []

    def __call__(self, stop: threading.Event, seconds: float) -> bool:
        self.delays.append(seconds)
        if len(self.delays) == self.end_on:
            child = [eid for eid, e in self.api.executions.items() if e.get("parent_execution_id")][-1]
            self.api.end_execution(child, self.status, **self.end)
        return stop.is_set()


def test_a_child_playbook_is_started_then_polled_with_a_growing_wait_until_it_ends(
    api: InMemoryControlPlane,
) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    waits = Waits(api, end_on=3, ctx={"doubled": 42}, results={"start": 42})
    handled = service(api, wait=waits, child_poll_s=0.25, child_poll_max_s=0.75).handle(note(cmd))
    assert handled == Handled("reported", "3001", "ok")
    (started,) = api.calls_to("execute")
    assert started == {
        "path": "children/double",
        "workload": {"x": 21},
        "parent_execution_id": "2001",
        "dedup": {"key": "command/3001/child/1", "window_secs": 86400},
    }
    assert waits.delays == [0.25, 0.5, 0.75]
    assert len(api.calls_to("execution")) == 4
    report = api.reports[0]
    child = report["result"]
    assert (child["status"], child["ctx"], child["results"]) == ("completed", {"doubled": 42}, {"start": 42})
    assert report["ctx_patch"] == [{"op": "add", "path": "/child_status", "value": "completed"}]


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_child_that_does_not_complete_is_child_failed(api: InMemoryControlPlane, status: str) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    waits = Waits(api, end_on=1, status=status, error={"kind": "step_failed", "step": "start"})
    assert service(api, wait=waits).handle(note(cmd)) == Handled("reported", "3001", "error")
    error = api.reports[0]["error"]
    assert (error["kind"], error["task"]) == ("child_failed", "call")


def test_a_rerun_after_the_reaper_follows_the_child_the_first_run_started(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    api.fail("events", UNREACHABLE)  # the first run's report is lost, as if its worker died
    with pytest.raises(UpstreamUnavailable):
        service(api, wait=Waits(api, end_on=1)).handle(note(cmd))
    api.add_command({**command("sub_playbook", "start"), "attempt": 2})  # the reaper re-issues it
    assert service(api, wait=Waits(api, end_on=99)).handle(note(cmd)).outcome == "reported"
    first, second = api.calls_to("execute")
    assert first["dedup"] == second["dedup"]
    assert len([e for e in api.executions.values() if e.get("parent_execution_id")]) == 1
    assert api.reports[0]["attempt"] == 2 and api.reports[0]["status"] == "ok"


def test_child_polling_rides_out_an_unreachable_control_plane(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    api.fail("execution", UNREACHABLE, 503)
    waits = Waits(api, end_on=2)
    assert service(api, wait=waits).handle(note(cmd)) == Handled("reported", "3001", "ok")
    assert len(api.calls_to("execution")) == 3


def test_a_child_that_vanished_is_child_lost(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    api.fail("execution", 404)
    assert service(api, wait=Waits(api, end_on=99)).handle(note(cmd)).status == "error"
    assert api.reports[0]["error"]["kind"] == "child_lost"


@pytest.mark.parametrize(
    "status,kind", [(422, "child_start_failed"), (404, "child_start_failed"), (UNREACHABLE, "upstream_unavailable")]
)
def test_a_child_that_cannot_start_fails_the_task(api: InMemoryControlPlane, status: int, kind: str) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))
    api.fail("execute", status)
    assert service(api, wait=Waits(api, end_on=99)).handle(note(cmd)) == Handled("reported", "3001", "error")
    assert api.reports[0]["error"]["kind"] == kind and api.calls_to("execution") == []


def test_stopping_ends_child_polling(api: InMemoryControlPlane) -> None:
    cmd = api.add_command(command("sub_playbook", "start"))

    def cancelled_while_waiting(stop: threading.Event, seconds: float) -> bool:
        api.end_execution("2001", "cancelled")  # the parent is cancelled: the next heartbeat is refused
        return stop.wait(GUARD_S)

    handled = service(api, wait=cancelled_while_waiting, heartbeat_s=0.001).handle(note(cmd))
    assert handled == Handled("stopped", "3001") and api.reports == []


# -- notifications ------------------------------------------------------------------------------------------------


def test_a_notification_reads_its_references() -> None:
    read = Notification.from_mapping(
        {"execution_id": "1", "command_id": 2, "event_id": "3", "step": "fetch", "attempt": "2", "traceparent": "t"}
    )
    assert read == Notification("1", "2", "3", "fetch", 2, "t")


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {},
        {"execution_id": "1"},
        {"execution_id": "1", "command_id": "x"},
        {"execution_id": "1", "command_id": "9" * 20},
    ],
)
def test_a_notification_without_its_ids_is_a_400(data: Any) -> None:
    with pytest.raises(BadNotification) as info:
        Notification.from_mapping(data)
    assert (info.value.status, info.value.code) == (400, "invalid_notification")


def test_a_child_started_inside_an_iteration_carries_the_iteration_as_meta_parent_iter(
    api: InMemoryControlPlane,
) -> None:
    it = {"index": 1, "item": "h2", "iterator": "hotel", "parallel": False}
    cmd = api.add_command(command("nested_loop_parent", "start", kind="iteration", iteration=it))
    waits = Waits(api, end_on=1, results={"start": ["h2/1-r1/0", "h2/1-r2/1"]})
    assert service(api, wait=waits).handle(note(cmd)) == Handled("reported", "3001", "ok")
    (started,) = api.calls_to("execute")
    assert started["meta"] == {"parent_iter": {"hotel": "h2", "index": 1}}
    assert api.reports[0]["result"] == ["h2/1-r1/0", "h2/1-r2/1"]


def test_a_report_offers_the_free_slots_and_the_commands_handed_over_run_at_once_on_them() -> None:
    api = InMemoryControlPlane(now=lambda: NOW)
    together = threading.Barrier(3, timeout=GUARD_S)  # the three handed commands, running at one time

    def meet(_call: ToolCall) -> str:
        if hook.calls > 1:  # the delivered command runs alone; the three handed to its report meet
            together.wait()
        return "met"

    hook = Hook(meet)
    first, *handed = [api.add_command(adhoc({"h": {"kind": "hook"}}, command_id=str(3001 + i))) for i in range(4)]
    svc = service(api, hook, eager_slots=2)
    assert svc.handle(note(first)) == Handled("reported", "3001", "ok")
    reports = {r["command_id"]: r for r in api.reports}
    assert sorted(reports) == ["3001", "3002", "3003", "3004"] and not together.broken
    assert reports["3001"]["next_slots"] == 3  # its own thread's next command and two slots
    assert all(api.commands[c["command_id"]]["worker_id"] == WORKER for c in handed)
    assert svc.slots.free == 2  # every slot back once its command's chain ended


def test_without_slots_a_delivery_takes_one_command_at_a_time() -> None:
    api = InMemoryControlPlane(now=lambda: NOW)
    first, *_rest = [api.add_command(adhoc({"n": {"kind": "noop"}}, command_id=str(3001 + i))) for i in range(3)]
    svc = service(api)
    assert svc.handle(note(first)) == Handled("reported", "3001", "ok")
    assert [r["command_id"] for r in api.reports] == ["3001", "3002", "3003"]  # one after another
    assert all("next_slots" not in r for r in api.reports)


def test_a_command_handed_back_without_its_workload_runs_with_the_one_the_worker_holds() -> None:
    api = InMemoryControlPlane(now=lambda: NOW)
    task = {"n": {"kind": "noop", "result": "{{ workload.greeting }}"}}
    first, second = [api.add_command(adhoc(task, command_id=str(3001 + i))) for i in range(2)]
    for cmd in (first, second):
        cmd["scope"]["workload"] = {"greeting": "hello"}
    assert service(api).handle(note(first)) == Handled("reported", "3001", "ok")
    assert api.reports[0]["has_workload"] is True  # so the control plane left it out of the second
    assert [r["result"] for r in api.reports] == ["hello", "hello"]


def test_the_notification_of_a_command_a_report_handed_over_is_acked_without_a_claim() -> None:
    api = InMemoryControlPlane(now=lambda: NOW)
    first, second = [api.add_command(adhoc({"n": {"kind": "noop"}}, command_id=str(3001 + i))) for i in range(2)]
    svc = service(api)
    assert svc.handle(note(first)) == Handled("reported", "3001", "ok")
    assert [r["command_id"] for r in api.reports] == ["3001", "3002"]  # the second was handed over and run
    claims = len(api.calls_to("claim"))
    assert svc.handle(note(second)) == Handled("already_claimed", "3002")  # its notification, arriving late
    assert len(api.calls_to("claim")) == claims  # no claim asked for it
    assert len(api.reports) == 2  # and it did not run again


def test_the_notification_of_a_re_issued_attempt_of_a_handed_command_is_claimed_and_run() -> None:
    api = InMemoryControlPlane(now=lambda: NOW)
    first, second = [api.add_command(adhoc({"n": {"kind": "noop"}}, command_id=str(3001 + i))) for i in range(2)]
    svc = service(api)
    svc.handle(note(first))
    second.update(status="issued", attempt=2, worker_id=None)  # the reaper issued it again
    assert svc.handle({**note(second), "attempt": 2}) == Handled("reported", "3002", "ok")
    assert [r["command_id"] for r in api.reports] == ["3001", "3002", "3002"]
