"""``noetl-cloud demo``: one run of the whole system on the local stack, checked end to end.

1. The stack with every role (reused when it runs; ``local up --roles all`` also prepared the demo's
   catalog entries, secrets, database and Pub/Sub subscription: :mod:`noetl_cloud.demo.setup`).
2. A fixture API on a free loopback port, and a version of ``demo/orders`` that pages through it.
3. Live traffic: signed webhooks for three schemes through the ingress, JSON messages published to
   the runtime's topic; every message becomes one execution, all of which must complete.
4. An outage: the execute role stopped; webhooks to the same listeners are spooled (202); execute
   started again, and the stack drains the spool by itself (the circuit's probe asks the drainer, the
   stack's scheduler calls it as Cloud Scheduler would; no drain command): each spooled delivery
   runs exactly once.
5. Checks: every message one execution, every execution completed, every order saved once to
   ``noetl_demo.demo_orders`` (by frames), the spool empty, live projections equal to a fresh fold
   of each execution's events (replay parity). Then the summary and the commands to look closer.

Exit 0 only when every check held; otherwise 1, naming what did not.

This module is the command (:func:`main`): :mod:`~noetl_cloud.demo.phases` drives the phases and
the checks, :mod:`~noetl_cloud.demo.report` names what did not hold and prints the summary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping

from noetl_cloud.demo.fixture import FixtureApi

# The command's face: its options and its error are imported from here (cli/operate.py), as ``__all__`` says.
from noetl_cloud.demo.phases import ROLES, Demo, DemoError, Options
from noetl_cloud.demo.report import inspect_commands, table


def main(env: Mapping[str, str], options: Options) -> int:
    """Run the demo against the local stack of ``env`` (``NOETL_LOCAL_*``); the exit status."""
    from noetl_cloud.local.layout import DEMO_API_PORT
    from noetl_cloud.local.stack import LocalStack

    def say(line: str) -> None:
        print(line, file=sys.stderr if options.as_json else sys.stdout, flush=True)

    started = time.monotonic()
    stack = LocalStack.from_env(env)
    missing = [r for r in ROLES if r not in stack.available_roles()]
    if missing:
        raise DemoError(f"this checkout lacks the roles {', '.join(missing)} (functions/<role>/main.py)")
    lines: list[str] = []
    stack_env = stack.up(echo=lines.append, roles=list(ROLES))
    fresh = [line.split()[0] for line in lines if " started in " in line]
    say(f"stack: {len(fresh)} components started{' (' + ', '.join(fresh) + ')' if fresh else ''}, the rest reused")
    demo = Demo(stack_env, stack, options, say)
    try:
        # The port the stack's worker allows http tasks to reach (NOETL_HTTP_TOOL_ALLOW).
        with FixtureApi(stack.port_base + DEMO_API_PORT) as fixture:
            summary = demo.run(fixture)
    finally:
        demo.close()
    summary["total_s"] = round(time.monotonic() - started, 1)
    if options.as_json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        say("")
        say(table(summary))
        say("")
        say(inspect_commands(summary, stack.port_base, stack_env["NOETL_DATABASE_URL"], str(stack.state_dir / "logs")))
    if summary["problems"]:
        for problem in summary["problems"]:
            print(f"noetl-cloud: demo: {problem}", file=sys.stderr)
        return 1
    if not options.as_json:
        say(f"\ndemo OK in {summary['total_s']} s")
    return 0


__all__ = ["DemoError", "Options", "main"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(os.environ, Options()))
