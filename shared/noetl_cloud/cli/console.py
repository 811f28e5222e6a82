"""``noetl-cloud console``: the web console (docs/console.md) in an ordinary browser, through a loopback
proxy that adds the API's credentials to every request."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from noetl_cloud.cli.output import say

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def add_parser(sub: SubParsers) -> None:
    console = sub.add_parser(
        "console", help="serve the web console on 127.0.0.1 with the API's credentials added (Ctrl-C stops it)"
    )
    console.add_argument("--port", type=int, default=8089, help="the loopback port (default 8089)")
    console.add_argument("--api-url", help="the control plane (default: NOETL_API_URL)")
    console.set_defaults(handler=serve_console)


def serve_console(args: argparse.Namespace) -> int:
    from noetl_cloud.console.proxy import ConsoleProxy
    from noetl_cloud.remote import credentials_from_env

    base, token = credentials_from_env(os.environ, args.api_url)
    proxy = ConsoleProxy(base, token, port=args.port)
    say(f"console: {proxy.url} (the control plane at {base}); Ctrl-C stops it")
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
    return 0
