"""What ``local/docker-compose.yml``'s one-shot ``setup`` service does once the control plane answers.

The same set-up ``noetl-cloud local up --roles all`` does for its processes, for the containers of
the compose file: the topics (one command topic per pool, the events topic), the emulator's push
subscriptions to the worker and projector services (by their compose service names, with the push
token in the endpoint's query as the local stack passes it), the spool bucket, and the demo's
catalog entries, listeners and wallet (``noetl_cloud.demo.setup.prepare``). Idempotent: run again,
it changes nothing.

    python -m noetl_cloud.local.compose      (the compose file's environment)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from noetl_cloud.local import provision
from noetl_cloud.settings import Settings

#: The compose services the emulator pushes to, and the port every role's container serves on.
WORKER_SERVICE = "worker"
PROJECTOR_SERVICE = "projector"
CONTAINER_PORT = 8080


def push_subscriptions(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Subscription -> (topic, push endpoint): pool ``shared``'s commands to the worker service, the
    events to the projector service."""
    defaults = Settings()
    commands = defaults.command_topic(env.get("NOETL_WORKER_POOL", "shared"))
    worker = f"http://{WORKER_SERVICE}:{CONTAINER_PORT}/?token={env['NOETL_WORKER_PUSH_TOKEN']}"
    projector = f"http://{PROJECTOR_SERVICE}:{CONTAINER_PORT}/?token={env['NOETL_PROJECTOR_PUSH_TOKEN']}"
    return {
        f"{commands}-worker": (commands, worker),
        f"{defaults.events_topic}-projector": (defaults.events_topic, projector),
    }


def setup(env: Mapping[str, str]) -> list[str]:
    """Topics, push subscriptions, spool bucket, demo; one line each."""
    from noetl_cloud.demo.setup import prepare

    pools = Settings.from_env({k: v for k, v in env.items() if k == "NOETL_POOLS"}).pools
    plain = dict(env)
    lines = [f"topics {', '.join(provision.ensure_topics(plain, pools))}"]
    for subscription, (topic, endpoint) in push_subscriptions(env).items():
        provision.ensure_push(plain, topic, subscription, endpoint)
        lines.append(f"push {subscription} -> {endpoint.split('?')[0]}")
    provision.ensure_spool_bucket(plain)
    lines.append(f"demo {prepare(env, Path(env['NOETL_SECRETS_DIR']))}")
    return lines


if __name__ == "__main__":
    for line in setup(os.environ):
        print(line, file=sys.stdout)
