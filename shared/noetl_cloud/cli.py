"""The ``noetl-cloud`` command.

Sub-commands are added by the issue that builds each capability; each handler imports what it
needs when it runs, so ``noetl-cloud --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from noetl_cloud.errors import BadRequest, NoetlError


def _local(args: argparse.Namespace) -> int:
    from noetl_cloud.local.stack import LocalStack, export_lines

    stack = LocalStack.from_env(os.environ)
    if args.action == "up":
        roles = stack.available_roles() if args.roles == "all" else [r for r in args.roles.split(",") if r]
        stack.up(roles=roles)
    elif args.action == "down":
        stack.down(purge=args.purge)
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


def _db(args: argparse.Namespace) -> int:
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


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from noetl_cloud.engine.local import parse_sets, run_file

    overrides = parse_sets(args.set)
    keychain = None
    if args.keychain:
        # The file holds secrets: messages name the file, never its content.
        try:
            keychain = yaml.safe_load(Path(args.keychain).read_text(encoding="utf-8"))
        except OSError as exc:
            raise BadRequest(f"--keychain {args.keychain}: cannot read ({exc.strerror})", code="usage") from None
        except yaml.YAMLError:
            raise BadRequest(f"--keychain {args.keychain}: not YAML or JSON", code="usage") from None
        if not isinstance(keychain, dict) or not all(isinstance(entry, dict) for entry in keychain.values()):
            raise BadRequest(f"--keychain {args.keychain}: expects a mapping of alias -> entry", code="usage")
    if args.events:
        with open(args.events, "w", encoding="utf-8") as events:
            result = run_file(Path(args.playbook), overrides, events=events, keychain=keychain)
    else:
        result = run_file(Path(args.playbook), overrides, keychain=keychain)
    print(
        json.dumps(
            {
                "execution_id": result.execution_id,
                "status": result.status,
                "ctx": result.ctx,
                "results": result.results,
                "error": result.error,
            },
            indent=2,
            default=str,
        )
    )
    return 0 if result.status == "completed" else 1


def _spool(args: argparse.Namespace) -> int:
    from noetl_cloud.settings import Settings
    from noetl_cloud.spool import operator

    settings = Settings.from_env(os.environ)
    if args.action == "drain":
        return operator.drain(settings, args.subscription, print, resume=args.resume)
    spool = operator.open_spool(settings, args.subscription, args.backend, args.bucket or args.dir)
    if args.action == "show":
        if not args.name:
            raise BadRequest("show needs the item's name (as `spool ls` prints it)", code="usage")
        return operator.show(spool, args.name, print, payload=args.payload)
    return operator.ls(
        spool, args.subscription, print, dlq=args.action == "dlq", lane=args.lane, limit=args.limit, as_json=args.json
    )


def _execute(args: argparse.Namespace) -> int:
    from noetl_cloud import remote
    from noetl_cloud.engine.local import parse_sets

    overrides = parse_sets(args.set)
    with remote.api_from_env(os.environ, args.api_url) as api:
        path = remote.catalog_path(api, args.target)
        started = remote.start(api, path, overrides, args.pool)
        eid = started["execution_id"]
        print(f"execution {eid} started on pool {started['execution_pool']} ({path})", file=sys.stderr)
        if not args.wait:
            print(json.dumps(started, indent=2))
            return 0

        def step(event: dict[str, Any]) -> None:
            payload = event["payload"]
            print(f"  {event['event_type']:<12} {payload.get('step')}", file=sys.stderr)

        detail = remote.follow(api, eid, timeout_s=args.timeout, on_step=None if args.quiet else step)
    keys = ("execution_id", "status", "ctx", "results", "error", "execution_pool")
    print(json.dumps({k: detail.get(k) for k in keys}, indent=2, default=str))
    return 0 if detail["status"] == "completed" else 1


def _replay(args: argparse.Namespace) -> int:
    from noetl_cloud import remote
    from noetl_cloud.replay import operator

    with remote.api_from_env(os.environ, args.api_url) as api:
        return operator.verify(
            api,
            tenant_id=args.tenant_id or os.environ.get("NOETL_TENANT_ID") or "default",
            organization_id=args.organization_id or os.environ.get("NOETL_ORGANIZATION_ID") or "default",
            execution_id=args.execution_id,
            wait_s=args.wait,
            err=lambda line: print(line, file=sys.stderr),
        )


def _subscribe(args: argparse.Namespace) -> int:
    from pathlib import Path

    from noetl_cloud.runtime.local import subscribe
    from noetl_cloud.settings import Settings

    if not args.local:
        raise BadRequest(
            "subscribe runs a subscription in this process: pass --local "
            "(the deployed form is the subscription_runtime role, docs/runtime.md)",
            code="usage",
        )
    settings = Settings.from_env(os.environ)
    summary = subscribe(
        Path(args.subscription),
        events_file=Path(args.events),
        playbooks=Path(args.playbooks) if args.playbooks else None,
        spool_dir=Path(args.spool_dir) if args.spool_dir else None,
        max_messages=args.max_messages,
        duration_s=args.duration,
        project_id=settings.project_id or os.environ.get("GOOGLE_CLOUD_PROJECT"),
        emulator_host=settings.pubsub_emulator_host,
        nats_url=settings.nats_url,
    )
    print(json.dumps(summary, indent=2))
    return 0


def _demo(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="noetl-cloud", description="NoETL Cloud operator command")
    sub = parser.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="the local stack: PostgreSQL and the emulators as processes")
    local.add_argument("action", choices=["up", "down", "status", "env"])
    local.add_argument("--json", action="store_true", help="status as JSON")
    local.add_argument("--purge", action="store_true", help="down: also delete the state folder and its data")
    local.add_argument(
        "--roles", default="", help="up: roles to run too, comma-separated, or 'all' (every functions/<role>)"
    )
    local.set_defaults(handler=_local)

    db = sub.add_parser("db", help="database migrations (reads NOETL_DATABASE_URL or NOETL_CLOUDSQL_INSTANCE)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", default="head")
    db.set_defaults(handler=_db)

    run = sub.add_parser("run", help="run a playbook in this process and print how it ended")
    run.add_argument("playbook", help="the playbook YAML file")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload override")
    run.add_argument("--events", metavar="FILE", help="also write every event as JSON lines to FILE")
    run.add_argument(
        "--keychain", metavar="FILE", help="credentials: a YAML/JSON file mapping alias -> entry (never printed)"
    )
    run.set_defaults(handler=_run)

    execute = sub.add_parser(
        "execute", help="start an execution through the control plane's API (a catalog path or a playbook file)"
    )
    execute.add_argument("target", help="a catalog path (demo/fetch), or a playbook file to register first")
    execute.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="workload override")
    execute.add_argument("--pool", help="execution pool (default: the deployment's default pool)")
    execute.add_argument("--wait", action="store_true", help="follow the execution to its end; exit 1 if it failed")
    execute.add_argument("--timeout", type=float, default=600.0, help="--wait: give up after this many seconds")
    execute.add_argument("--quiet", action="store_true", help="--wait: do not print each step as it ends")
    execute.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    execute.set_defaults(handler=_execute)

    spool = sub.add_parser("spool", help="a subscription's store-and-forward spool: list, inspect, drain, dead letters")
    spool.add_argument("action", choices=["ls", "show", "drain", "dlq"])
    spool.add_argument("subscription", help="the subscription's catalog path")
    spool.add_argument("name", nargs="?", help="show: the item's object name, as ls prints it")
    spool.add_argument("--lane", help="ls, dlq: one lane only")
    spool.add_argument("--limit", type=int, default=100, help="ls, dlq: at most this many items (default 100)")
    spool.add_argument("--json", action="store_true", help="ls, dlq: as JSON")
    spool.add_argument("--payload", action="store_true", help="show: the payload too")
    spool.add_argument("--resume", action="store_true", help="drain: lift the halt a poison left on a global lane")
    spool.add_argument("--backend", choices=["gcs", "s3", "local_disk"], help="look in this spool backend")
    spool.add_argument("--bucket", help="with --backend gcs or s3")
    spool.add_argument("--dir", help="with --backend local_disk")
    spool.set_defaults(handler=_spool)

    replay = sub.add_parser("replay", help="replay parity: compare live projections with a fresh fold of the events")
    replay.add_argument("action", choices=["verify"])
    replay.add_argument("--execution-id", required=True, help="the execution to verify")
    replay.add_argument("--tenant-id", help="default: NOETL_TENANT_ID, else 'default'")
    replay.add_argument("--organization-id", help="default: NOETL_ORGANIZATION_ID, else 'default'")
    replay.add_argument("--wait", type=float, default=0.0, help="give a lagging projector this many seconds first")
    replay.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    replay.set_defaults(handler=_replay)

    subscribe = sub.add_parser(
        "subscribe", help="hold a pull subscription in this process; each message runs its playbook in-process"
    )
    subscribe.add_argument("subscription", help="the kind: Subscription YAML file")
    subscribe.add_argument("--local", action="store_true", help="run the playbooks in this process (required)")
    subscribe.add_argument("--playbooks", help="folder of the playbook files (default: the subscription's folder)")
    subscribe.add_argument("--events", default="subscribe-events.jsonl", help="JSONL file of every event (appended)")
    subscribe.add_argument("--spool-dir", help="local_disk spool folder (default: spool.path, else .noetl-spool)")
    subscribe.add_argument("--max-messages", type=int, help="stop after this many messages ran")
    subscribe.add_argument("--duration", type=float, help="stop after this many seconds")
    subscribe.set_defaults(handler=_subscribe)

    demo = sub.add_parser(
        "demo", help="the whole system on the local stack: webhooks, Pub/Sub, frames, an outage, replay parity"
    )
    demo.add_argument("--json", action="store_true", help="print the summary as JSON (progress goes to stderr)")
    demo.add_argument("--webhooks", type=int, default=3, help="signed webhooks per scheme (default 3)")
    demo.add_argument("--messages", type=int, default=6, help="Pub/Sub messages to the runtime (default 6)")
    demo.add_argument("--spooled", type=int, default=2, help="webhooks per scheme during the outage (default 2)")
    demo.add_argument("--timeout", type=float, default=150.0, help="give each wait for executions this many seconds")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except NoetlError as exc:
        print(f"noetl-cloud: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # StackError and friends carry a message written for operators
        print(f"noetl-cloud: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
