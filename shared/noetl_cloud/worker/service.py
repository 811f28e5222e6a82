"""The worker service: one command notification → claim, run (with heartbeats), report (docs/distributed.md).

:meth:`WorkerService.handle` returns a :class:`Handled` for every delivery Pub/Sub should ack: the report
was accepted (or was a duplicate), someone else holds the command (409), the execution ended (409), the
command is unknown (404), the lease was lost mid-run, or the control plane refused a report that can
never pass (4xx). It raises :class:`~noetl_cloud.web.client.UpstreamUnavailable` (503, retryable) only
when the control plane cannot be reached, answers 5xx, or refuses the worker's own credentials (401/403:
the worker's deployment is wrong, not the message), so Pub/Sub redelivers.

While the pipeline runs, a heartbeat thread extends the claim lease every ``heartbeat_s`` seconds, or
every third of the lease when the lease is shorter. A heartbeat answered 409 (``lease_lost``,
``execution_terminal``) stops the run before its next task attempt (retry waits end early too) and
nothing is reported.

Eager dispatch: the worker reports with ``accept_next`` while the delivery is younger than
``eager_budget_s``; when the report issues exactly one next command, the answer holds it already
claimed for this worker, and the worker runs it in the same delivery (a sequential chain pays no
Pub/Sub hop per step). The report also offers the process's free slots (``worker/slots.py``,
``next_slots``): the answer fills them with the oldest commands waiting in the pool, already claimed,
and each runs its own chain on a slot thread, so a worker keeps as many commands in flight as it has
threads whatever the push concurrency. The delivery's outcome is its first command's; a later command
whose report cannot be delivered keeps its lease until it runs out, and the reaper issues it again.

A ``kind: playbook`` task starts a child execution with ``POST /api/execute`` (``parent_execution_id``
set, ``meta.parent_iter`` when started inside a loop iteration, and a dedup key
``command/<command_id>/child/<n>`` so a command re-run after its worker died follows the child the first
run started instead of starting another), then polls ``GET
/api/executions/{id}`` with a growing wait until the child is completed, failed or cancelled. Its
outcome is what the in-process runner gives: ``{execution_id, status, ctx, results}``, ok when the child
completed and ``child_failed`` otherwise.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING, Any

from noetl_cloud import telemetry
from noetl_cloud.engine.outcome import Clock, Outcome, ToolResolver
from noetl_cloud.engine.templates import Renderer
from noetl_cloud.envelope import parse_time, utc_now
from noetl_cloud.frames.worker import cursor_plan, run_cursor_slot
from noetl_cloud.observability import TraceContext, current_trace, execution_scope
from noetl_cloud.web.client import ApiResponse, UpstreamUnavailable, segment
from noetl_cloud.worker.delivery import BadNotification as BadNotification
from noetl_cloud.worker.delivery import ControlPlaneRefused as ControlPlaneRefused
from noetl_cloud.worker.delivery import HandedOver, HandledOutcome
from noetl_cloud.worker.delivery import Handled as Handled
from noetl_cloud.worker.delivery import Notification as Notification
from noetl_cloud.worker.heartbeat import Heartbeat, StoppableClock
from noetl_cloud.worker.port import ControlPlaneApi, error_code, error_message
from noetl_cloud.worker.run import PlanCache, RunChild, run_command
from noetl_cloud.worker.slots import Slots

if TYPE_CHECKING:
    from noetl_cloud.payload.port import PayloadStore

log = logging.getLogger(__name__)

TERMINAL = ("completed", "failed", "cancelled")
#: How long a child started by a ``kind: playbook`` task stays deduplicated (a re-run follows it).
CHILD_DEDUP_WINDOW_S = 24 * 3600


def wait_on(event: threading.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` or until ``event`` is set; true when it is set."""
    return event.wait(seconds)


class WorkerService:
    """Claims, runs and reports commands for one worker identity. Safe to share between threads.

    ``clock`` is the engine's clock for task timing and retry waits; without one each run gets a real
    clock whose waits end when the run is stopped. ``wait(stop, seconds)`` is how child polling waits
    (true when the run was stopped meanwhile); ``now`` is the wall clock of reports and leases.
    """

    def __init__(
        self,
        api: ControlPlaneApi,
        *,
        worker_id: str,
        tools: ToolResolver,
        clock: Clock | None = None,
        heartbeat_s: float = 10.0,
        keychain: Mapping[str, Any] | None = None,
        plans: PlanCache | None = None,
        child_poll_s: float = 0.25,
        child_poll_max_s: float = 5.0,
        wait: Callable[[threading.Event, float], bool] = wait_on,
        now: Callable[[], datetime] = utc_now,
        frames: ControlPlaneApi | None = None,
        payloads: PayloadStore | None = None,
        eager_budget_s: float = 30.0,
        eager_slots: int = 0,
    ) -> None:
        if heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be > 0")
        if child_poll_s <= 0 or child_poll_max_s < child_poll_s:
            raise ValueError("child polling needs 0 < child_poll_s <= child_poll_max_s")
        if not worker_id:
            raise ValueError("worker_id must not be empty")
        self.api = api
        self.worker_id = worker_id
        self.tools = tools
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.keychain = keychain or {}
        self.plans = plans if plans is not None else PlanCache()
        self.child_poll_s = child_poll_s
        self.child_poll_max_s = child_poll_max_s
        self.wait = wait
        self.now = now
        self.renderer = Renderer()
        self.frames = frames  # the frames role's API, for cursor loops (the control plane's when unset)
        self.payloads = payloads  # where frame rows go as Arrow IPC
        self.eager_budget_s = eager_budget_s  # how long one delivery keeps taking next commands (0: never)
        self.slots = Slots(eager_slots)  # threads for the further commands a report hands over
        self.handed = HandedOver()  # what report answers handed over, whose notifications need no claim

    # -- one delivery ------------------------------------------------------------------------------

    def handle(self, notification: Notification | Mapping[str, Any]) -> Handled:
        """Claim, run and report the notified command. Raises :class:`UpstreamUnavailable` to be redelivered."""
        note = notification if isinstance(notification, Notification) else Notification.from_mapping(notification)
        trace = TraceContext.parse(note.traceparent)
        token = current_trace.set(trace.child()) if trace is not None and current_trace.get() is None else None
        try:
            with execution_scope(note.execution_id), telemetry.remote_parent(note.traceparent):
                return self._handle(note)
        finally:
            if token is not None:
                current_trace.reset(token)

    def _handle(self, note: Notification) -> Handled:
        cid = note.command_id
        if self.handed.holds(note):  # a report's answer gave it to this process: the claim is ours
            log.info("notified command already handed to this worker", extra={"command_id": cid})
            return Handled("already_claimed", cid)
        claim = self._call("POST", f"/api/commands/{segment(cid)}/claim", {"worker_id": self.worker_id})
        if not claim.ok:
            return self._claim_refused(note, claim)
        command = claim.json if isinstance(claim.json, dict) else {}
        deadline = time.monotonic() + self.eager_budget_s
        filled: list[Future[None]] = []  # slots this delivery filled: it answers after they are done
        handled, following = self._run(command, cid, _attempt(command.get("attempt"), note.attempt), deadline, filled)
        self._chain(following, deadline, filled)
        for slot in filled:
            if slot.exception() is not None:  # waits for it; its commands' leases run out for the reaper
                log.error("a command run on a slot failed", exc_info=slot.exception())
        return handled

    def _chain(self, following: dict[str, Any] | None, deadline: float, filled: list[Future[None]] | None) -> None:
        """Run handed commands one after another, each already claimed for us (eager dispatch)."""
        while following is not None:
            next_id = str(following.get("command_id"))
            try:
                with execution_scope(str(following.get("execution_id"))):
                    _next, following = self._run(
                        following, next_id, _attempt(following.get("attempt"), 1), deadline, filled
                    )
            except UpstreamUnavailable:
                log.warning(
                    "an eagerly handed command was not reported; the reaper issues it again",
                    extra={"command_id": next_id},
                )
                break

    def _run(
        self, command: dict[str, Any], cid: str, attempt: int, deadline: float, filled: list[Future[None]] | None
    ) -> tuple[Handled, dict[str, Any] | None]:
        if not telemetry.tracing():  # the hot path: no span, no attributes
            return self._run_command(command, cid, attempt, deadline, filled)
        attributes = {"noetl.command_id": cid, "noetl.step": command.get("step"), "noetl.attempt": attempt}
        with telemetry.span("worker.command", {**attributes, "noetl.execution_id": command.get("execution_id")}):
            return self._run_command(command, cid, attempt, deadline, filled)

    def _run_command(
        self, command: dict[str, Any], cid: str, attempt: int, deadline: float, filled: list[Future[None]] | None
    ) -> tuple[Handled, dict[str, Any] | None]:
        """Run one claimed command and report it; the next command the answer hands over, if any. With
        ``filled`` (the delivery's own thread), the report also offers the free slots, and the further
        commands handed over start on them (appended to ``filled``)."""
        log.info("command claimed", extra={"command_id": cid, "step": command.get("step"), "attempt": attempt})

        stopped = threading.Event()
        heartbeat = Heartbeat(self, cid, stopped, self.heartbeat_interval(command.get("lease_expires_at")))
        heartbeat.start()
        cursor = cursor_plan(command, self.plans)
        try:
            if cursor is not None:  # a slot of a cursor loop: frames through the frames API (docs/frames.md)
                report = run_cursor_slot(
                    command,
                    cursor,
                    frames=self.frames if self.frames is not None else self.api,
                    worker_id=self.worker_id,
                    tools=self.tools,
                    payloads=self.payloads,
                    clock=self.clock if self.clock is not None else StoppableClock(stopped),
                    renderer=self.renderer,
                    keychain=self.keychain,
                    run_child=self._child_runner(command, stopped),
                    now=self.now,
                    stop=stopped.is_set,
                )
            else:
                report = run_command(
                    command,
                    tools=self.tools,
                    clock=self.clock if self.clock is not None else StoppableClock(stopped),
                    run_child=self._child_runner(command, stopped),
                    compiled=self.plans,
                    keychain=self.keychain,
                    renderer=self.renderer,
                    now=self.now,
                    stop=stopped.is_set,
                )
        finally:
            heartbeat.stop()
        if report.stopped or stopped.is_set():
            log.info("command run stopped: its lease is gone or its execution ended", extra={"command_id": cid})
            return Handled("stopped", cid), None

        body = report.to_body(self.worker_id, attempt, cid)
        body["accept_next"] = time.monotonic() < deadline
        body["has_workload"] = True  # the command handed back for this execution comes without it
        reserved = self.slots.reserve() if body["accept_next"] and filled is not None else 0
        if reserved:
            body["next_slots"] = 1 + reserved
        try:
            answer = self._call("POST", "/api/events", body)
        except BaseException:
            self.slots.release(reserved)
            raise
        handed = answer.json.get("next") if answer.ok and isinstance(answer.json, dict) else None
        commands = [c for c in handed if isinstance(c, dict)] if isinstance(handed, list) else []
        for handed_command in commands:
            self.handed.add(handed_command)
        for same in commands:
            scope = same.get("scope")
            if (
                isinstance(scope, dict)
                and "workload" not in scope
                and same.get("execution_id") == command.get("execution_id")
            ):
                scope["workload"] = command.get("scope", {}).get("workload")
        further = commands[1 : 1 + reserved]
        self.slots.release(reserved - len(further))
        for handed_over in further:
            assert filled is not None  # only a report that offered slots gets more than one command
            filled.append(
                self.slots.run(telemetry.in_context(functools.partial(self._chain, handed_over, deadline, None)))
            )
        if answer.ok:
            duplicate = isinstance(answer.json, dict) and answer.json.get("duplicate") is True
            log.info("command reported", extra={"command_id": cid, "status": report.status, "duplicate": duplicate})
            return Handled("duplicate" if duplicate else "reported", cid, report.status), (
                commands[0] if commands else None
            )
        if answer.status == 409:
            log.info("report refused: the lease was taken over", extra={"command_id": cid, "code": error_code(answer)})
            return Handled("lease_lost", cid, report.status), None
        log.error(
            "report refused for good",
            extra={"command_id": cid, "http_status": answer.status, "code": error_code(answer)},
        )
        return Handled("rejected", cid, report.status), None

    def _claim_refused(self, note: Notification, claim: ApiResponse) -> Handled:
        cid, code = note.command_id, error_code(claim)
        if claim.status == 409:
            outcome: HandledOutcome = "execution_terminal" if code == "execution_terminal" else "already_claimed"
            log.info("claim refused", extra={"command_id": cid, "code": code})
            return Handled(outcome, cid)
        if claim.status == 404:
            log.warning("notified command does not exist", extra={"command_id": cid})
            return Handled("not_found", cid)
        log.error("claim refused for good", extra={"command_id": cid, "http_status": claim.status, "code": code})
        return Handled("rejected", cid)

    def _call(self, method: str, path: str, body: Any = None) -> ApiResponse:
        """One control-plane call; 5xx and refused credentials raise (retryable), other answers return."""
        response = self.api.get(path) if method == "GET" else self.api.post(path, body)
        if response.status >= 500:
            raise UpstreamUnavailable(
                f"the control plane answered {response.status}",
                details={"method": method, "path": path, "status": response.status},
            )
        if response.status in (401, 403):
            raise ControlPlaneRefused(
                "the control plane refused this worker's credentials",
                details={"method": method, "path": path, "status": response.status, "code": error_code(response)},
            )
        return response

    def heartbeat_interval(self, lease_expires_at: Any) -> float:
        """``heartbeat_s``, or a third of the lease left when that is shorter."""
        interval = self.heartbeat_s
        if isinstance(lease_expires_at, str):
            try:
                left = (parse_time(lease_expires_at) - self.now()).total_seconds()
            except ValueError:
                left = 0.0
            if left > 0:
                interval = min(interval, left / 3)
        return interval

    # -- child playbooks ---------------------------------------------------------------------------

    def _child_runner(self, command: Mapping[str, Any], stopped: threading.Event) -> RunChild:
        parent = str(command.get("execution_id"))
        command_id = str(command.get("command_id"))
        started = itertools.count(1)

        def run_child(path: str, args: dict[str, Any], parent_iter: Mapping[str, Any] | None) -> Outcome:
            body: dict[str, Any] = {
                "path": path,
                "workload": args,
                "parent_execution_id": parent,
                "dedup": {"key": f"command/{command_id}/child/{next(started)}", "window_secs": CHILD_DEDUP_WINDOW_S},
            }
            if parent_iter is not None:  # the child's commands carry it back as scope.parent_iter (iter.parent)
                body["meta"] = {"parent_iter": dict(parent_iter)}
            try:
                response = self.api.post("/api/execute", body)
            except UpstreamUnavailable:
                return Outcome.fail("upstream_unavailable", f"child playbook {path}: the control plane is unreachable")
            if response.status >= 500:
                return Outcome.fail(
                    "upstream_unavailable", f"child playbook {path}: the control plane answered {response.status}"
                )
            child = response.json.get("execution_id") if isinstance(response.json, dict) else None
            if not response.ok or not isinstance(child, str):
                failed = Outcome.fail("child_start_failed", f"child playbook {path}: {error_message(response)}")
                return Outcome("error", None, {**(failed.error or {}), "code": error_code(response)})
            log.info("child execution started", extra={"child_execution_id": child, "path": path})
            return self._follow(child, path, stopped)

        return run_child

    def _follow(self, child: str, path: str, stopped: threading.Event) -> Outcome:
        """Poll the child until it ends, waiting longer each time (up to ``child_poll_max_s``)."""
        delay = self.child_poll_s
        while not stopped.is_set():
            try:
                response: ApiResponse | None = self.api.get(f"/api/executions/{segment(child)}")
            except UpstreamUnavailable:
                response = None  # the child runs on; look again later
            if response is not None and response.ok and isinstance(response.json, dict):
                if response.json.get("status") in TERMINAL:
                    return _child_outcome(child, path, response.json)
            elif response is not None and response.status == 404:
                return Outcome.fail("child_lost", f"child execution {child} of {path} is gone")
            elif response is not None and 400 <= response.status < 500 and response.status != 429:
                return Outcome.fail("child_unreadable", f"child execution {child}: {error_message(response)}")
            if self.wait(stopped, delay):
                break
            delay = min(delay * 2, self.child_poll_max_s)
        return Outcome.fail("stopped", f"the run was stopped while child execution {child} ran")


def _child_outcome(child: str, path: str, execution: Mapping[str, Any]) -> Outcome:
    """The in-process runner's child outcome (engine/local.py) from the child's execution resource."""
    status = execution.get("status")
    body = {
        "execution_id": child,
        "status": status,
        "ctx": execution.get("ctx") or {},
        "results": execution.get("results") or {},
    }
    if status == "completed":
        return Outcome.ok(body)
    failed = Outcome.fail("child_failed", f"child playbook {path} {status}")
    return Outcome("error", body, {**(failed.error or {}), "child": execution.get("error")})


def _attempt(value: Any, fallback: int | None) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return fallback if fallback is not None and fallback >= 1 else 1


__all__ = [
    "BadNotification",
    "ControlPlaneRefused",
    "Handled",
    "Notification",
    "WorkerService",
    "wait_on",
]
