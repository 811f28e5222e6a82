"""The ``noetl-cloud`` command.

One module per concept: :mod:`~noetl_cloud.cli.local` (the local stack), :mod:`~noetl_cloud.cli.playbooks`
(the commands that register or run a document: run, execute, subscribe), :mod:`~noetl_cloud.cli.operate`
(db, spool, replay, demo), :mod:`~noetl_cloud.cli.executions` (executions list, show, tail),
:mod:`~noetl_cloud.cli.console` (the web console's proxy) and :mod:`~noetl_cloud.cli.output` (errors and
progress). Each handler imports what it needs when it runs, so ``noetl-cloud --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from noetl_cloud import __version__
from noetl_cloud.cli import console, executions, local, operate, playbooks
from noetl_cloud.cli.output import report_error
from noetl_cloud.errors import NoetlError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="noetl-cloud", description="NoETL Cloud operator command")
    parser.add_argument("--version", action="version", version=f"noetl-cloud {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    local.add_parser(sub)
    operate.add_parsers(sub)
    playbooks.add_parsers(sub)
    executions.add_parsers(sub)
    console.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except NoetlError as exc:
        report_error(exc)
        return 2
    except RuntimeError as exc:  # StackError and friends carry a message written for operators
        print(f"noetl-cloud: {exc}", file=sys.stderr)
        return 1


__all__ = ["build_parser", "main"]
