"""An in-memory control plane for the worker's port: the command routes of docs/distributed.md in dicts.

It keeps commands, executions and the reports it accepted, applies the contract's answers (one claim per
command, heartbeats only from the holder, one accepted report per command) and records every call. It
does no orchestration: a report ends its command and nothing is issued next (a report with
``accept_next`` is handed the oldest issued commands, up to its ``next_slots``, as the pool handoff
does). Faults are scripted per route with :meth:`InMemoryControlPlane.fail`.
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from noetl_cloud.web.client import ApiResponse, UpstreamUnavailable

#: The status a scripted fault answers with to mean "unreachable": the call raises instead.
UNREACHABLE = 0
TERMINAL = ("completed", "failed", "cancelled")

_ROUTES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("claim", "POST", re.compile(r"^/api/commands/(?P<id>[^/]+)/claim$")),
    ("heartbeat", "POST", re.compile(r"^/api/commands/(?P<id>[^/]+)/heartbeat$")),
    ("command", "GET", re.compile(r"^/api/commands/(?P<id>[^/]+)$")),
    ("events", "POST", re.compile(r"^/api/events$")),
    ("execute", "POST", re.compile(r"^/api/execute$")),
    ("execution", "GET", re.compile(r"^/api/executions/(?P<id>[^/]+)$")),
)


def _answer(status: int, body: Any) -> ApiResponse:
    return ApiResponse(status, copy.deepcopy(body), {"content-type": "application/json"})


def _error(status: int, code: str, message: str) -> ApiResponse:
    return _answer(status, {"error": {"code": code, "message": message}})


class InMemoryControlPlane:
    """The control-plane API of the worker, in memory. Safe to call from several threads."""

    def __init__(self, *, lease_s: float = 30.0, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.lease_s = lease_s
        self.now = now
        self.commands: dict[str, dict[str, Any]] = {}
        self.executions: dict[str, dict[str, Any]] = {}
        self.reports: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str, Any]] = []
        self.heartbeat_refused = threading.Event()
        self._faults: dict[str, list[int]] = {}
        self._ids = itertools.count(9_000_000_000)
        self._lock = threading.RLock()

    # -- set-up ------------------------------------------------------------------------------------

    def add_command(self, command: dict[str, Any]) -> dict[str, Any]:
        """Store ``command`` as ``issued`` (its execution ``running`` unless known)."""
        with self._lock:
            stored = {**copy.deepcopy(command), "status": "issued", "worker_id": None, "lease_expires_at": None}
            self.commands[str(command["command_id"])] = stored
            self.executions.setdefault(str(command["execution_id"]), {"status": "running"})
            return stored

    def end_execution(
        self,
        execution_id: str,
        status: str,
        *,
        ctx: dict[str, Any] | None = None,
        results: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Mark an execution ended (``cancelled`` makes later claims and heartbeats 409)."""
        with self._lock:
            execution = self.executions.setdefault(execution_id, {})
            execution.update({"status": status, "ctx": ctx or {}, "results": results or {}, "error": error})

    def fail(self, route: str, *statuses: int) -> None:
        """Answer the next calls of ``route`` (claim, heartbeat, command, events, execute, execution) with
        these statuses, in order; :data:`UNREACHABLE` raises :class:`UpstreamUnavailable` instead."""
        with self._lock:
            self._faults.setdefault(route, []).extend(statuses)

    def calls_to(self, route: str) -> list[Any]:
        """The bodies (or paths, for GETs) of the calls made to ``route``."""
        with self._lock:
            return [body for name, _path, body in self.calls if name == route]

    # -- the port ----------------------------------------------------------------------------------

    def get(self, path: str) -> ApiResponse:
        """``GET path``."""
        return self._dispatch("GET", path, None)

    def post(self, path: str, json: Any = None) -> ApiResponse:
        """``POST path``."""
        return self._dispatch("POST", path, json)

    def _dispatch(self, method: str, path: str, body: Any) -> ApiResponse:
        with self._lock:
            for name, verb, pattern in _ROUTES:
                match = pattern.match(path)
                if verb == method and match is not None:
                    self.calls.append((name, path, copy.deepcopy(body) if body is not None else path))
                    faults = self._faults.get(name)
                    if faults:
                        status = faults.pop(0)
                        if status == UNREACHABLE:
                            raise UpstreamUnavailable("the API could not be reached")
                        return _error(status, "injected", f"injected {status}")
                    handler = getattr(self, f"_{name}")
                    response: ApiResponse = handler(match.groupdict().get("id"), body)
                    return response
            return _error(404, "not_found", f"no route {method} {path}")

    def _lease(self) -> str:
        return (self.now() + timedelta(seconds=self.lease_s)).isoformat()

    def _claim(self, command_id: str, body: Any) -> ApiResponse:
        command = self.commands.get(command_id)
        if command is None:
            return _error(404, "command_not_found", f"no command {command_id}")
        if self.executions.get(str(command["execution_id"]), {}).get("status") in TERMINAL:
            if command["status"] in ("issued", "claimed"):
                command["status"] = "cancelled"
            return _error(409, "execution_terminal", "the execution already ended")
        if command["status"] != "issued":
            return _error(409, "command_already_claimed", "the command is already claimed")
        command.update(status="claimed", worker_id=(body or {}).get("worker_id"), lease_expires_at=self._lease())
        return _answer(200, command)

    def _heartbeat(self, command_id: str, body: Any) -> ApiResponse:
        command = self.commands.get(command_id)
        if command is None:
            return _error(404, "command_not_found", f"no command {command_id}")
        if self.executions.get(str(command["execution_id"]), {}).get("status") in TERMINAL:
            self.heartbeat_refused.set()
            return _error(409, "execution_terminal", "the execution already ended")
        if command["status"] != "claimed" or command["worker_id"] != (body or {}).get("worker_id"):
            self.heartbeat_refused.set()
            return _error(409, "lease_lost", "the command is no longer this worker's")
        command["lease_expires_at"] = self._lease()
        return _answer(200, {"lease_expires_at": command["lease_expires_at"]})

    def _command(self, command_id: str, _body: Any) -> ApiResponse:
        command = self.commands.get(command_id)
        if command is None:
            return _error(404, "command_not_found", f"no command {command_id}")
        return _answer(200, command)

    def _events(self, _id: Any, body: Any) -> ApiResponse:
        command = self.commands.get(str((body or {}).get("command_id")))
        if command is None:
            return _error(404, "command_not_found", "no such command")
        if command["status"] in ("completed", "failed", "cancelled"):
            return _answer(200, {"accepted": False, "duplicate": True})
        if command["worker_id"] != body.get("worker_id") or command["attempt"] != body.get("attempt"):
            return _error(409, "lease_lost", "the command is no longer this worker's")
        command["status"] = "completed" if body.get("status") == "ok" else "failed"
        self.reports.append(copy.deepcopy(body))
        handed = []
        if body.get("accept_next"):  # the pool handoff: the oldest issued commands, claimed for the worker
            for waiting in [c for c in self.commands.values() if c["status"] == "issued"][: body.get("next_slots", 1)]:
                waiting.update(status="claimed", worker_id=body.get("worker_id"), lease_expires_at=self._lease())
                handed.append(copy.deepcopy(waiting))
                if body.get("has_workload") and waiting.get("execution_id") == command.get("execution_id"):
                    handed[-1].get("scope", {}).pop("workload", None)  # as the control plane: the worker holds it
        return _answer(200, {"accepted": True, "duplicate": False, "next": handed})

    def _execute(self, _id: Any, body: Any) -> ApiResponse:
        dedup = (body or {}).get("dedup") or {}
        scope = ((body or {}).get("parent_execution_id"), dedup.get("key"))
        if dedup.get("key"):
            for execution_id, execution in self.executions.items():
                if execution.get("dedup") == scope:
                    return _answer(202, {"execution_id": execution_id, "status": "duplicate"})
        execution_id = str(next(self._ids))
        self.executions[execution_id] = {
            "execution_id": execution_id,
            "path": body.get("path"),
            "workload": body.get("workload"),
            "parent_execution_id": body.get("parent_execution_id"),
            "status": "running",
            "dedup": scope if dedup.get("key") else None,
        }
        return _answer(202, {"execution_id": execution_id, "status": "started"})

    def _execution(self, execution_id: str, _body: Any) -> ApiResponse:
        execution = self.executions.get(execution_id)
        if execution is None:
            return _error(404, "execution_not_found", f"no execution {execution_id}")
        return _answer(200, {"execution_id": execution_id, **execution})


__all__ = ["UNREACHABLE", "InMemoryControlPlane"]
