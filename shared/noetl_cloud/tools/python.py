"""``kind: python``: run a ``code`` block in a fresh interpreter (a subprocess) with a timeout.

The code defines ``main(**kwargs)``; it is called with the task's rendered ``args`` mapping and its return
value (JSON) is the result. Code without ``main`` may instead assign ``result``. ``print`` output goes to the
child's stderr and is kept (truncated) in the error of a failed run. The timeout is ``spec.timeout``
(seconds, default 60). An exception in the code is an error outcome with ``py.exception_type``.
``code`` is not rendered as a template (it is in :attr:`PythonTool.raw_fields`).

Python tasks are **trusted code**: they run with the worker's user, file system and network (see
docs/security.md). What the tool does keep from them is the worker's environment: the child starts in
isolated mode (``-I``) with :data:`CHILD_ENV` only, so the internal API token, the database URL, push
tokens and cloud credentials held in the worker's variables are not handed to task code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from noetl_cloud.engine.outcome import Outcome, ToolCall

DEFAULT_TIMEOUT = 60.0
_STDERR_TAIL = 2000
#: The whole environment of a task's interpreter: nothing of the worker's is inherited.
CHILD_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
}

_RUNNER = r"""
import json, sys
request = json.load(sys.stdin)
out = sys.stdout
sys.stdout = sys.stderr
try:
    space = {"__name__": "__noetl_task__"}
    exec(compile(request["code"], "<task>", "exec"), space)
    if callable(space.get("main")):
        value = space["main"](**request["args"])
    else:
        value = space.get("result")
    text = json.dumps({"ok": True, "result": value})
except BaseException as exc:
    text = json.dumps({"ok": False, "type": type(exc).__name__, "message": str(exc)})
out.write(text)
out.flush()
"""


class PythonTool:
    """Runs task code out of process so a crash, a hang or ``sys.exit`` cannot take the engine down."""

    kind = "python"
    raw_fields: tuple[str, ...] = ("code",)

    def __init__(self, python: str = sys.executable, env: Mapping[str, str] = CHILD_ENV) -> None:
        self.python = python
        self.env = dict(env)

    def run(self, call: ToolCall) -> Outcome:
        """Run ``config['code']`` with ``config['args']``."""
        code = call.config.get("code")
        args = call.config.get("args") or {}
        if not isinstance(code, str) or not isinstance(args, dict):
            return Outcome.fail("bad_task", "a python task needs `code` (text) and optional `args` (a mapping)")
        timeout = _seconds(call.spec.get("timeout"), DEFAULT_TIMEOUT)
        try:
            request = json.dumps({"code": code, "args": args})
        except (TypeError, ValueError) as exc:
            return Outcome.fail("bad_task", f"args are not JSON: {exc}")
        try:
            done = subprocess.run(  # noqa: S603 - our own interpreter, code passed on stdin
                [self.python, "-I", "-c", _RUNNER],
                input=request,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Outcome.fail("timeout", f"python task ran longer than {timeout} s", py={"exception_type": "Timeout"})
        return _outcome(done)


def _seconds(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def _outcome(done: subprocess.CompletedProcess[str]) -> Outcome:
    try:
        body = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = done.stderr[-_STDERR_TAIL:]
        return Outcome.fail("crashed", f"python task exited {done.returncode} without a result: {tail}")
    if body.get("ok"):
        return Outcome.ok(body.get("result"))
    exc_type = str(body.get("type", "Exception"))
    outcome = Outcome.fail("exception", f"{exc_type}: {body.get('message', '')}", py={"exception_type": exc_type})
    if done.stderr:
        outcome.error["output"] = done.stderr[-_STDERR_TAIL:]  # type: ignore[index]
    return outcome
