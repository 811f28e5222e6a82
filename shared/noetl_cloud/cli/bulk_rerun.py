"""``noetl-cloud executions rerun``: re-run every ended execution a filter matches, as one operation.

The filter options are the list's (``--status`` defaults to ``failed``); the command sends one idempotency
key (``--key``, or a fresh one) so a retried request finds the operation instead of starting another,
then prints the operation's progress until it is ``done`` or ``failed`` (exit 0 when it is done with no
re-run refused, 1 otherwise; ``--no-wait`` prints the operation and returns). An operation with no
progress for longer than the API's resume threshold is sent again with the same key, which resumes it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

from noetl_cloud.cli.output import say

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

FILTERS = ("status", "path", "version", "subscription", "pool", "parent", "since", "until")
POLL_S = 0.5
#: No progress for longer than the API's resume threshold (2 min): the same request again resumes it.
RESUME_AFTER_S = 130.0


def add_parser(actions: SubParsers) -> None:
    rerun = actions.add_parser("rerun", help="re-run every ended execution a filter matches (one operation)")
    rerun.add_argument("--status", default="failed", help="failed (default), cancelled, completed (comma-separated)")
    rerun.add_argument("--path", help="the playbook's catalog path")
    rerun.add_argument("--version", type=int, help="the playbook's version (with --path)")
    rerun.add_argument("--subscription", help="the subscription's catalog path")
    rerun.add_argument("--pool", help="the execution pool")
    rerun.add_argument("--parent", help="the parent execution's id")
    rerun.add_argument("--since", help="created at or after (ISO 8601 with offset)")
    rerun.add_argument("--until", help="created before (ISO 8601 with offset)")
    rerun.add_argument("--max", type=int, default=100, help="refuse when more match (default 100, at most 1000)")
    rerun.add_argument("--key", help="the idempotency key (default: a new one); the same key finds the same operation")
    rerun.add_argument("--no-wait", action="store_true", help="print the operation and return")
    rerun.add_argument("--timeout", type=float, default=600.0, help="stop waiting after this many seconds (exit 2)")
    rerun.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    rerun.set_defaults(handler=bulk_rerun)


def progress_line(op: dict[str, Any]) -> str:
    return (
        f"operation {op['operation_id']}: {op['state']} · {op['done']} of {op['matched']} · "
        f"started {op['started']} · duplicates {op['duplicates']} · failed {op['failed']}"
    )


def bulk_rerun(args: argparse.Namespace) -> int:
    from noetl_cloud import remote

    which = {name: str(getattr(args, name)) for name in FILTERS if getattr(args, name) is not None}
    body = {"filter": which, "max": args.max, "idempotency_key": args.key or uuid.uuid4().hex}
    deadline = time.monotonic() + args.timeout
    with remote.api_from_env(os.environ, args.api_url) as api:
        op = api.post("/api/executions/reruns", json=body).raise_for_error().json
        say(progress_line(op))
        if args.no_wait:
            print(json.dumps(op, indent=2))
            return 0
        shown, progressed_at = op["done"], time.monotonic()
        while op["state"] == "running":
            if time.monotonic() > deadline:
                say(f"operation {op['operation_id']} still running after {args.timeout:g} s")
                return 2
            time.sleep(POLL_S)
            op = api.get(f"/api/executions/reruns/{op['operation_id']}").raise_for_error().json
            if op["done"] != shown:
                shown, progressed_at = op["done"], time.monotonic()
                say(progress_line(op))
            elif time.monotonic() - progressed_at > RESUME_AFTER_S:  # its process is gone: resume it
                progressed_at = time.monotonic()
                op = api.post("/api/executions/reruns", json=body).raise_for_error().json
    for result in op["results"]:
        new = result.get("execution_id") or result.get("code")
        say(f"{result['rerun_of']} -> {new} ({result['status']})")
    say(progress_line(op))
    return 0 if op["state"] == "done" and op["failed"] == 0 else 1
