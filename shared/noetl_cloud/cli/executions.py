"""``noetl-cloud executions list|show|tail``: the executions API (docs/api.md) from a terminal.

``list`` prints one line per execution, newest first, with the API's filters as options (``--all``
follows the cursor to the last page); ``show`` prints one execution as JSON; ``tail`` prints each event
of an execution as it is appended (the API's long poll) and ends with the execution: exit 0 when it
completed, 1 when it failed or was cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from noetl_cloud.cli import bulk_rerun
from noetl_cloud.cli.output import say
from noetl_cloud.errors import BadRequest

if TYPE_CHECKING:
    from noetl_cloud.web.client import ApiClient

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: The list's filters: option name -> query parameter.
FILTERS = {
    "status": "status",
    "path": "path",
    "version": "version",
    "subscription": "subscription",
    "pool": "pool",
    "parent": "parent",
    "since": "since",
    "until": "until",
    "limit": "limit",
}


def add_parsers(sub: SubParsers) -> None:
    executions = sub.add_parser(
        "executions", help="list executions, show one, follow one's events to its end, or re-run failed ones"
    )
    actions = executions.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="executions newest first, filtered")
    listing.add_argument("--status", help="started, completed, failed, cancelled (comma-separated)")
    listing.add_argument("--path", help="the playbook's catalog path")
    listing.add_argument("--version", type=int, help="the playbook's version (with --path)")
    listing.add_argument("--subscription", help="the subscription's catalog path")
    listing.add_argument("--pool", help="the execution pool")
    listing.add_argument("--parent", help="the parent execution's id")
    listing.add_argument("--since", help="created at or after (ISO 8601 with offset)")
    listing.add_argument("--until", help="created before (ISO 8601 with offset)")
    listing.add_argument("--limit", type=int, help="executions a page (default 50)")
    listing.add_argument("--all", action="store_true", help="every page, not only the first")
    listing.add_argument("--json", action="store_true", help="as JSON lines, one execution each")
    listing.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    listing.set_defaults(handler=list_executions)

    show = actions.add_parser("show", help="one execution as JSON")
    show.add_argument("execution_id")
    show.add_argument("--events", action="store_true", help="its events too")
    show.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    show.set_defaults(handler=show_execution)

    tail = actions.add_parser("tail", help="print each event as it is appended until the execution ends")
    tail.add_argument("execution_id")
    tail.add_argument("--json", action="store_true", help="each event as a JSON line")
    tail.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (exit 2)")
    tail.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    tail.set_defaults(handler=tail_execution)
    bulk_rerun.add_parser(actions)


def _id(value: str) -> str:
    if not value.isdigit():
        raise BadRequest(f"{value!r} is not an execution id", code="usage")
    return value


def pages(api: ApiClient, params: dict[str, str], *, every: bool) -> Iterator[dict[str, Any]]:
    """The executions of ``GET /api/executions?params``: the first page, or every page with ``every``."""
    query = dict(params)
    while True:
        body = api.get("/api/executions?" + urllib.parse.urlencode(query)).raise_for_error().json
        yield from body["items"]
        if not every or not body["next_cursor"]:
            return
        query["cursor"] = body["next_cursor"]


def line_of(item: dict[str, Any]) -> str:
    """One execution as ``list`` prints it."""
    version = f"@{item['version']}" if item.get("version") is not None else ""
    took = f"{item['duration_ms']} ms" if item.get("duration_ms") is not None else "-"
    return (
        f"{item['execution_id']:<20} {item['status']:<10} {item['path'] + version:<32} "
        f"{item['execution_pool']:<10} {item['created_at']}  {took}"
    )


def event_line(event: dict[str, Any]) -> str:
    """One event as ``tail`` prints it: time, type and what it concerns."""
    payload = event.get("payload") or {}
    about = " ".join(f"{k}={payload[k]}" for k in ("step", "iteration", "attempt", "status") if k in payload)
    return f"{event['event_time']}  {event['event_type']:<28} {about}".rstrip()


def list_executions(args: argparse.Namespace) -> int:
    from noetl_cloud import remote

    params = {query: str(getattr(args, option)) for option, query in FILTERS.items() if getattr(args, option)}
    with remote.api_from_env(os.environ, args.api_url) as api:
        for item in pages(api, params, every=args.all):
            say(json.dumps(item) if args.json else line_of(item))
    return 0


def show_execution(args: argparse.Namespace) -> int:
    from noetl_cloud import remote

    eid = _id(args.execution_id)
    with remote.api_from_env(os.environ, args.api_url) as api:
        detail = api.get(f"/api/executions/{eid}").raise_for_error().json
        if args.events:
            detail["events"] = api.get(f"/api/executions/{eid}/events").raise_for_error().json["events"]
    print(json.dumps(detail, indent=2, default=str))
    return 0


def tail_execution(args: argparse.Namespace) -> int:
    from noetl_cloud import remote

    eid = _id(args.execution_id)

    def emit(event: dict[str, Any]) -> None:
        say(json.dumps(event) if args.json else event_line(event))

    with remote.api_from_env(os.environ, args.api_url) as api:
        status = remote.follow_events(api, eid, emit, timeout_s=args.timeout)
    say(f"execution {eid} {status}")
    return 0 if status == "completed" else 1
