"""The operator's commands: ``db`` (migrations), ``spool`` (a subscription's spool), ``replay verify``
and ``demo``."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from noetl_cloud.cli.output import progress
from noetl_cloud.errors import BadRequest

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def add_parsers(sub: SubParsers) -> None:
    db = sub.add_parser("db", help="database migrations (reads NOETL_DATABASE_URL or NOETL_CLOUDSQL_INSTANCE)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", default="head")
    db.set_defaults(handler=db_migrate)

    spool = sub.add_parser("spool", help="a subscription's store-and-forward spool: list, inspect, drain, dead letters")
    spool.add_argument("action", choices=["ls", "show", "drain", "dlq", "resend"])
    spool.add_argument("subscription", help="the subscription's catalog path")
    spool.add_argument("name", nargs="?", help="show: the item's object name, as ls prints it")
    spool.add_argument("--lane", help="ls, dlq: one lane only")
    spool.add_argument("--limit", type=int, default=100, help="ls, dlq: at most this many items (default 100)")
    spool.add_argument("--json", action="store_true", help="ls, dlq: as JSON")
    spool.add_argument("--payload", action="store_true", help="show: the payload too")
    spool.add_argument("--resume", action="store_true", help="drain: lift the halt a poison left on a global lane")
    spool.add_argument("--item", help="resend: this dead letter (its name, as dlq prints it)")
    spool.add_argument("--all", action="store_true", help="resend: every dead letter (of --lane, with --reason)")
    spool.add_argument("--reason", help="resend --all: only dead letters of this reason (e.g. poison)")
    spool.add_argument("--no-drain", action="store_true", help="resend: do not drain afterwards")
    spool.add_argument("--backend", choices=["gcs", "s3", "local_disk"], help="look in this spool backend")
    spool.add_argument("--bucket", help="with --backend gcs or s3")
    spool.add_argument("--dir", help="with --backend local_disk")
    spool.set_defaults(handler=spool_command)

    replay = sub.add_parser("replay", help="replay parity: compare live projections with a fresh fold of the events")
    replay.add_argument("action", choices=["verify"])
    replay.add_argument("--execution-id", required=True, help="the execution to verify")
    replay.add_argument("--tenant-id", help="default: NOETL_TENANT_ID, else 'default'")
    replay.add_argument("--organization-id", help="default: NOETL_ORGANIZATION_ID, else 'default'")
    replay.add_argument("--wait", type=float, default=0.0, help="give a lagging projector this many seconds first")
    replay.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    replay.set_defaults(handler=replay_verify)

    demo = sub.add_parser(
        "demo", help="the whole system on the local stack: webhooks, Pub/Sub, frames, an outage, replay parity"
    )
    demo.add_argument("--json", action="store_true", help="print the summary as JSON (progress goes to stderr)")
    demo.add_argument("--webhooks", type=int, default=3, help="signed webhooks per scheme (default 3)")
    demo.add_argument("--messages", type=int, default=6, help="Pub/Sub messages to the runtime (default 6)")
    demo.add_argument("--spooled", type=int, default=2, help="webhooks per scheme during the outage (default 2)")
    demo.add_argument("--timeout", type=float, default=150.0, help="give each wait for executions this many seconds")
    demo.set_defaults(handler=run_demo)


def db_migrate(args: argparse.Namespace) -> int:
    from noetl_cloud.db import migrate
    from noetl_cloud.db.engine import create_db_engine
    from noetl_cloud.settings import Settings

    if args.action == "downgrade" and args.revision == "head":
        raise BadRequest("downgrade needs a target revision: base, or a revision id such as 0001", code="usage")
    settings = Settings.from_env(os.environ)
    engine = create_db_engine(settings, pool_size=1, max_overflow=0)
    try:
        if args.action == "upgrade":
            migrate.upgrade(engine, args.revision)
        elif args.action == "downgrade":
            migrate.downgrade(engine, args.revision)
        print(f"database at revision {migrate.current_revision(engine)} (head {migrate.head_revision(engine)})")
    finally:
        engine.dispose()
    return 0


def spool_command(args: argparse.Namespace) -> int:
    from noetl_cloud.settings import Settings
    from noetl_cloud.spool import operator

    settings = Settings.from_env(os.environ)
    if args.action == "drain":
        if settings.api_url:
            operator.registered(settings, args.subscription)  # an unknown subscription is an error
        progress(f"draining the spool of {args.subscription} ...")
        return operator.drain(settings, args.subscription, print, resume=args.resume)
    spool = operator.open_spool(settings, args.subscription, args.backend, args.bucket or args.dir)
    if args.action == "resend":
        return spool_resend(args, settings, spool)
    if args.action == "show":
        if not args.name:
            raise BadRequest("show needs the item's name (as `spool ls` prints it)", code="usage")
        return operator.show(spool, args.name, print, payload=args.payload)
    return operator.ls(
        spool, args.subscription, print, dlq=args.action == "dlq", lane=args.lane, limit=args.limit, as_json=args.json
    )


def spool_resend(args: argparse.Namespace, settings: Any, spool: Any) -> int:
    """Dead letters back to their lanes, then (with a control plane to replay to) a drain in this process."""
    from noetl_cloud.spool import operator

    if bool(args.item) == bool(args.all) or (args.item and (args.lane or args.reason)):
        raise BadRequest("resend needs --item NAME, or --all [--lane L] [--reason R]", code="usage")
    summary = operator.resend(
        spool, args.subscription, print, item=args.item, lane=args.lane, reason=args.reason, progress=progress
    )
    if summary["resent"] and settings.api_url and not args.no_drain:
        progress(f"draining the spool of {args.subscription} ...")
        operator.drain(settings, args.subscription, print)
    return 0 if summary["failed"] == 0 else 1


def replay_verify(args: argparse.Namespace) -> int:
    from noetl_cloud import remote
    from noetl_cloud.replay import operator

    with remote.api_from_env(os.environ, args.api_url) as api:
        return operator.verify(
            api,
            tenant_id=args.tenant_id or os.environ.get("NOETL_TENANT_ID") or "default",
            organization_id=args.organization_id or os.environ.get("NOETL_ORGANIZATION_ID") or "default",
            execution_id=args.execution_id,
            wait_s=args.wait,
            err=progress,
            progress=progress,
        )


def run_demo(args: argparse.Namespace) -> int:
    from noetl_cloud.demo.run import Options, main

    for name in ("webhooks", "messages", "spooled"):
        if not 1 <= getattr(args, name) <= 100:
            raise BadRequest(f"--{name} must be between 1 and 100", code="usage")
    options = Options(
        webhooks_per_scheme=args.webhooks,
        pubsub_messages=args.messages,
        outage_per_scheme=args.spooled,
        timeout_s=args.timeout,
        as_json=args.json,
    )
    return main(os.environ, options)
