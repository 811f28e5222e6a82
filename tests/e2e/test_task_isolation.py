"""Task isolation on running workers (issue #21 item 6): execute and a worker under gunicorn, commands
pushed through the Pub/Sub emulator, the worker holding its real secrets in its environment.

A python task read the internal API token, the database URL and the push tokens from its environment; an
http task reached the control plane on loopback and would reach the metadata server in the cloud.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from tests.e2e.test_distributed import PUSH_TOKEN, Cluster, cluster
from tests.integration.control_fixtures import TOKEN, command_topics, make_settings

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: isolation, path: e2e/isolation}
workload: {target: ""}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os
        def main():
            return dict(os.environ)
    next: [{step: fetch}]
  - step: fetch
    tool:
      kind: http
      url: "{{ workload.target }}"
      spec: {timeout: 5}
"""


@pytest.fixture(scope="module")
def workers(module_database_url: str, local_env: dict[str, str]) -> Iterator[Cluster]:
    """The default egress policy: nothing allowlisted (the suite's clusters allow loopback). Started once
    for the module: each test reads only its own execution."""
    prefix = f"t{secrets.token_hex(4)}-commands-"
    with (
        command_topics(make_settings(module_database_url, local_env, prefix)),
        cluster(module_database_url, local_env, prefix, NOETL_HTTP_TOOL_ALLOW="") as c,
    ):
        c.register(PLAYBOOK)
        yield c


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{api_port}/api/executions",  # the control plane, with the worker's token in reach
        "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token",
        "http://localhost:{api_port}/healthz",
    ],
)
def test_a_task_sees_none_of_the_workers_secrets_and_reaches_no_internal_address(workers: Cluster, target: str) -> None:
    database_url = workers.env["NOETL_DATABASE_URL"]  # the workers' own
    eid = workers.execute("e2e/isolation", {"target": target.format(api_port=workers.api_port)})
    detail = workers.wait(eid)

    environment = detail["results"]["start"]
    assert isinstance(environment, dict) and not any(name.startswith("NOETL_") for name in environment)
    for secret in (TOKEN, PUSH_TOKEN, database_url):
        assert secret not in json.dumps(environment)

    assert detail["status"] == "failed"
    assert "egress_denied" in json.dumps(detail["error"]), detail["error"]
