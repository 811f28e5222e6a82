"""The commands that register or run a document: ``run`` (in this process), ``execute`` (through the
control plane's API) and ``subscribe`` (a subscription held in this process).

A document the validator refuses ends the command with exit 2 and one line per problem
(:mod:`noetl_cloud.cli.output`), whether this process or the API found them.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from noetl_cloud.cli.output import progress
from noetl_cloud.errors import BadRequest

if TYPE_CHECKING:
    from noetl_cloud.envelope import EventEnvelope

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: The events a running playbook reports as progress, the way ``execute --wait`` follows them.
STEP_EVENTS = ("step.done", "step.failed", "loop.done", "step.denied")


def add_parsers(sub: SubParsers) -> None:
    run = sub.add_parser("run", help="run a playbook in this process and print how it ended")
    run.add_argument("playbook", help="the playbook YAML file")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload override")
    run.add_argument("--events", metavar="FILE", help="also write every event as JSON lines to FILE")
    run.add_argument(
        "--keychain", metavar="FILE", help="credentials: a YAML/JSON file mapping alias -> entry (never printed)"
    )
    run.add_argument("--quiet", action="store_true", help="do not print each step as it ends (stderr)")
    run.set_defaults(handler=run_playbook)

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
    execute.set_defaults(handler=execute_remote)

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
    subscribe.set_defaults(handler=subscribe_local)


class StepProgress:
    """An event sink that prints each step as it ends (stderr), as ``execute --wait`` does."""

    def emit(self, event: EventEnvelope) -> None:
        """Print ``event`` when it ends a step (of the playbook or of a child it runs)."""
        if event.event_type in STEP_EVENTS:
            progress(f"  {event.event_type:<12} {event.payload.get('step')}")


def run_playbook(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from noetl_cloud.engine.local import parse_sets, run_file
    from noetl_cloud.settings import Settings
    from noetl_cloud.tools.registry import default_registry

    overrides = parse_sets(args.set)
    tools = default_registry(http_allow=Settings.from_env(os.environ).http_tool_allow)
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
    sink = None if args.quiet else StepProgress()
    if args.events:
        with open(args.events, "w", encoding="utf-8") as events:
            result = run_file(Path(args.playbook), overrides, tools=tools, events=events, keychain=keychain, sink=sink)
    else:
        result = run_file(Path(args.playbook), overrides, tools=tools, keychain=keychain, sink=sink)
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


def execute_remote(args: argparse.Namespace) -> int:
    from noetl_cloud import remote
    from noetl_cloud.engine.local import parse_sets

    overrides = parse_sets(args.set)
    with remote.api_from_env(os.environ, args.api_url) as api:
        path = remote.catalog_path(api, args.target)
        started = remote.start(api, path, overrides, args.pool)
        eid = started["execution_id"]
        progress(f"execution {eid} started on pool {started['execution_pool']} ({path})")
        if not args.wait:
            print(json.dumps(started, indent=2))
            return 0

        def step(event: dict[str, Any]) -> None:
            payload = event["payload"]
            progress(f"  {event['event_type']:<12} {payload.get('step')}")

        detail = remote.follow(api, eid, timeout_s=args.timeout, on_step=None if args.quiet else step)
    keys = ("execution_id", "status", "ctx", "results", "error", "execution_pool")
    print(json.dumps({k: detail.get(k) for k in keys}, indent=2, default=str))
    return 0 if detail["status"] == "completed" else 1


def subscribe_local(args: argparse.Namespace) -> int:
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
    until = [
        f"{args.max_messages} messages" if args.max_messages else "",
        f"{args.duration:g} s" if args.duration else "",
    ]
    ends = " or ".join(u for u in until if u) or "Ctrl-C"
    progress(f"starting {args.subscription} (until {ends}); events appended to {args.events}")
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
        kafka_servers=settings.kafka_bootstrap_servers,
        http_allow=settings.http_tool_allow,
    )
    print(json.dumps(summary, indent=2))
    return 0
