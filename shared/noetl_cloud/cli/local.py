"""``noetl-cloud local up | down | status | env``: the local stack (noetl_cloud.local.stack)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from noetl_cloud.cli.output import say


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = sub.add_parser("local", help="the local stack: PostgreSQL and the emulators as processes")
    local.add_argument("action", choices=["up", "down", "status", "env"])
    local.add_argument("--json", action="store_true", help="status as JSON")
    local.add_argument("--purge", action="store_true", help="down: also delete the state folder and its data")
    local.add_argument(
        "--roles", default="", help="up: roles to run too, comma-separated, or 'all' (every functions/<role>)"
    )
    local.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from noetl_cloud.local.stack import LocalStack, export_lines

    stack = LocalStack.from_env(os.environ)
    if args.action == "up":
        roles = stack.available_roles() if args.roles == "all" else [r for r in args.roles.split(",") if r]
        stack.up(echo=say, roles=roles)
    elif args.action == "down":
        stack.down(echo=say, purge=args.purge)
    elif args.action == "env":
        sys.stdout.write(export_lines(stack.env()))
    elif args.action == "status":
        rows = stack.status()
        if args.json:
            print(json.dumps([r.to_dict() for r in rows], indent=2))
        else:
            print(f"{'component':<10} {'port':>6} {'pid':>8}  state      started in")
            for r in rows:
                state = "healthy" if r.healthy else ("unhealthy" if r.running else "stopped")
                started = f"{r.startup_seconds:.2f} s" if r.startup_seconds is not None else "-"
                print(f"{r.name:<10} {r.port:>6} {r.pid or '-':>8}  {state:<10} {started}")
        return 0 if all(r.healthy for r in rows) else 1
    return 0
