"""``noetl-cloud local up | down | status | env``: the local stack (noetl_cloud.local.stack)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from noetl_cloud.cli.output import say

if TYPE_CHECKING:
    from noetl_cloud.local.kafka_broker import KafkaBroker
    from noetl_cloud.local.stack import LocalStack
    from noetl_cloud.local.status import ComponentStatus


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = sub.add_parser("local", help="the local stack: PostgreSQL and the emulators as processes")
    local.add_argument("action", choices=["up", "down", "status", "env"])
    local.add_argument("--json", action="store_true", help="status as JSON")
    local.add_argument("--purge", action="store_true", help="down: also delete the state folder and its data")
    local.add_argument(
        "--roles", default="", help="up: roles to run too, comma-separated, or 'all' (every functions/<role>)"
    )
    local.add_argument(
        "--with",
        dest="with_",
        default="",
        help="up: optional components to run too, comma-separated: kafka (a Kafka-protocol broker, the kafka extra)",
    )
    local.set_defaults(handler=run)


OPTIONAL = ("kafka",)


def run(args: argparse.Namespace) -> int:
    from noetl_cloud.local.kafka_broker import KafkaBroker
    from noetl_cloud.local.stack import LocalStack, export_lines

    stack = LocalStack.from_env(os.environ)
    broker = KafkaBroker(stack.state_dir, stack.port_base)
    if args.action == "up":
        extra = [c for c in args.with_.split(",") if c]
        unknown = sorted(set(extra) - set(OPTIONAL))
        if unknown:
            say(f"unknown optional component(s) {', '.join(unknown)}: --with takes {', '.join(OPTIONAL)}")
            return 2
        roles = stack.available_roles() if args.roles == "all" else [r for r in args.roles.split(",") if r]
        kafka_env = broker.up(echo=say) if "kafka" in extra else {}
        os.environ.update(kafka_env)  # the roles started next get the broker's address too
        stack.up(echo=say, roles=roles)
        if kafka_env:
            with stack.env_file.open("a") as env_file:
                env_file.write("".join(f"{k}={v}\n" for k, v in sorted(kafka_env.items())))
    elif args.action == "down":
        broker.down(echo=say)
        stack.down(echo=say, purge=args.purge)
    elif args.action == "env":
        sys.stdout.write(export_lines(stack.env()))
    elif args.action == "status":
        rows = stack.status(every_role=True)
        if broker.record.is_file():  # started with --with kafka
            rows.append(_broker_row(broker))
        if args.json:
            print(json.dumps([r.to_dict() for r in rows], indent=2))
        else:
            print("\n".join(status_lines(stack, rows)))
        # Up means every service and every role `up` started answers; a role never started is listed, not missed.
        return 0 if all(r.healthy for r in rows if r.kind == "service" or r.recorded) else 1
    return 0


def _broker_row(broker: KafkaBroker) -> ComponentStatus:
    from noetl_cloud.local.status import ComponentStatus

    pid, healthy = broker.status()
    return ComponentStatus(
        name="kafka",
        port=broker.component.port,
        pid=pid,
        running=pid is not None,
        healthy=healthy,
        startup_seconds=broker.recorded().get("startup_seconds"),
        kind="service",
        recorded=True,
    )


def status_lines(stack: LocalStack, rows: list[ComponentStatus]) -> list[str]:
    """The state folder read, then one line per backing service and role."""
    recorded = stack.state_file.is_file()
    where = f"state folder {stack.state_dir}" + ("" if recorded else " (nothing recorded: never started here)")
    lines = [where, f"{'component':<20} {'kind':<9} {'port':>6} {'pid':>8}  state      started in"]
    for r in rows:
        state = "healthy" if r.healthy else ("unhealthy" if r.running else "stopped")
        started = f"{r.startup_seconds:.2f} s" if r.startup_seconds is not None else "-"
        lines.append(f"{r.name:<20} {r.kind:<9} {r.port:>6} {r.pid or '-':>8}  {state:<10} {started}")
    lines.extend(schedule_lines(rows))
    return lines


def schedule_lines(rows: list[ComponentStatus]) -> list[str]:
    """The maintenance schedule: each job, what it calls, how often (locally and in the cloud), its last run."""
    from noetl_cloud.maintenance.schedule import JOBS

    running = next((r.jobs for r in rows if r.name == "scheduler" and r.jobs is not None), None)
    seen = {j["job"]: j for j in running or []}
    head = "maintenance schedule" + ("" if running is not None else " (scheduler not running)")
    lines = ["", head, f"{'job':<20} {'every':>6} {'cloud cron':<12} {'runs':>5} {'fails':>5}  last  target"]
    for job in JOBS:
        j = seen.get(job.name, {})
        every = f"{j.get('every_s', job.local_every_s):g}s"
        target = j.get("target") or f"{job.role} {job.path}"
        lines.append(
            f"{job.name:<20} {every:>6} {job.schedule:<12} {j.get('runs', 0):>5} {j.get('failures', 0):>5}  "
            f"{j.get('last', '-')}  {target}"
        )
    return lines + subscription_lines(rows)


def subscription_lines(rows: list[ComponentStatus]) -> list[str]:
    """The scheduled subscriptions the ``subscription-tick`` job runs: cadence, state, next slot, last run."""
    report = next((r.subscriptions for r in rows if r.name == "scheduler" and r.subscriptions is not None), None)
    if report is None:
        return []
    if "error" in report:
        return ["", f"scheduled subscriptions: the execute role did not answer ({report['error']})"]
    lines = [
        "",
        "scheduled subscriptions",
        f"{'path':<28} {'cadence':<16} {'state':<7} {'runs':>5}  next run / last run",
    ]
    for job in report.get("jobs") or []:
        last = job.get("last_run") or {}
        last_text = (
            f"{last.get('due_at')} {last.get('status')} polled {last.get('polled')} started {last.get('started')}"
            if last
            else "-"
        )
        lines.append(
            f"{job.get('path', '?'):<28} {job.get('cadence', '?'):<16} {job.get('state', '?'):<7} "
            f"{job.get('runs', 0):>5}  {job.get('next_due') or '-'} / {last_text}"
        )
    lines.extend(f"{s.get('path')}: not scheduled ({s.get('reason')})" for s in report.get("skipped") or [])
    return lines
