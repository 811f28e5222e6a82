"""Least privilege between roles on the local stack (issue #21 item 7).

``noetl-cloud local up`` makes one token per purpose, gives each role process only its own, and every
internal route admits only the caller roles ``noetl_cloud.auth.roles.POLICY`` names for it: the
worker's token (which task code could borrow) cannot register a playbook or read a listener's
secret, the ingress's cannot report events or move a subscription, the operator's can do both of the
operator's things and still reads no listener secret. The stack's ``env`` and token files are the
owner's alone.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import requests

from noetl_cloud.demo.setup import LISTENERS
from noetl_cloud.local import tokens
from noetl_cloud.local.layout import ROLE_PORTS
from noetl_cloud.local.stack import LocalStack
from tests.integration.control_fixtures import playbook

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def stack(stack_env: dict[str, str]) -> LocalStack:
    state = os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))
    return LocalStack.from_env({**os.environ, "NOETL_LOCAL_STATE_DIR": state})


@pytest.fixture(scope="module")
def keys(stack: LocalStack) -> dict[str, str]:
    return dict(json.loads((stack.state_dir / tokens.TOKENS_FILE).read_text()))


def call(method: str, url: str, token: str, **kwargs: object) -> requests.Response:
    return requests.request(method, url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S, **kwargs)  # type: ignore[arg-type]


def forbidden(response: requests.Response) -> bool:
    body = response.json()
    return response.status_code == 403 and body["error"]["code"] == "forbidden_role"


def test_every_purpose_has_its_own_token_and_the_files_are_the_owners_alone(
    stack: LocalStack, keys: dict[str, str], stack_env: dict[str, str]
) -> None:
    assert set(keys) == set(tokens.PURPOSES)
    assert len(set(keys.values())) == len(keys), "two purposes share a token"
    for name in ("env", tokens.TOKENS_FILE):
        assert stat.S_IMODE((stack.state_dir / name).stat().st_mode) == 0o600, name
    assert stack_env["NOETL_INTERNAL_API_TOKEN"] == keys["operator"]  # the env file is the operator's
    assert not (stack.state_dir / "api_token").exists()


def test_a_role_process_holds_its_own_token_and_no_other(stack: LocalStack, keys: dict[str, str]) -> None:
    recorded = json.loads(stack.state_file.read_text())["components"]
    environ = Path(f"/proc/{recorded['worker']['pid']}/environ")
    if not environ.exists():
        pytest.skip("no /proc on this platform")
    variables = dict(
        item.split("=", 1) for item in environ.read_bytes().decode("utf-8", "replace").split("\0") if "=" in item
    )
    assert variables["NOETL_INTERNAL_API_TOKEN"] == keys["worker"]
    assert variables["NOETL_WORKER_PUSH_TOKEN"] == keys["worker_push"]
    held = set(variables.values())
    assert {keys[p] for p in tokens.PURPOSES if p not in ("worker", "worker_push")}.isdisjoint(held)
    assert variables.get("NOETL_INTERNAL_API_TOKEN_DIGESTS", "") == ""


def test_the_worker_token_cannot_register_a_playbook_or_read_a_listener_secret(
    stack_env: dict[str, str], keys: dict[str, str]
) -> None:
    api = stack_env["NOETL_API_URL"]
    listener = LISTENERS[0].listener
    registered = call("POST", f"{api}/api/catalog", keys["worker"], json={"content": playbook("authz/worker")})
    assert forbidden(registered), registered.text
    assert forbidden(call("GET", f"{api}/api/internal/ingress/{listener}", keys["worker"]))
    assert forbidden(call("POST", f"{api}/api/subscriptions/register", keys["worker"], json={"path": "x"}))
    assert forbidden(call("GET", f"{api}/api/executions", keys["worker"]))
    # its own routes answer past authorization (an unknown command is 404, not 403)
    assert call("GET", f"{api}/api/commands/1", keys["worker"]).status_code == 404


def test_the_ingress_token_cannot_post_events_or_transition_subscriptions(
    stack_env: dict[str, str], keys: dict[str, str]
) -> None:
    api = stack_env["NOETL_API_URL"]
    operator = keys["operator"]
    subscriptions = call("GET", f"{api}/api/subscriptions", operator).json()["items"]
    assert subscriptions, "the demo registers subscriptions"
    subscription_id = subscriptions[0]["subscription_id"]
    assert forbidden(call("POST", f"{api}/api/events", keys["ingress"], json={}))
    assert forbidden(call("POST", f"{api}/api/subscriptions/{subscription_id}/pause", keys["ingress"]))
    assert forbidden(call("POST", f"{api}/api/catalog", keys["ingress"], json={"content": playbook("authz/i")}))
    # nor start a playbook its listener does not dispatch to
    other = {"path": "authz/not-a-target", "meta": {"listener": LISTENERS[0].listener}}
    refused = call("POST", f"{api}/api/execute", keys["ingress"], json=other)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden_target", refused.text
    # what the ingress is for: its listeners' configuration
    listener = LISTENERS[0].listener
    config = call("GET", f"{api}/api/internal/ingress/{listener}", keys["ingress"])
    assert config.status_code == 200 and config.headers["Cache-Control"] == "no-store"


def test_the_operator_token_registers_and_transitions_but_reads_no_listener_secret(
    stack_env: dict[str, str], keys: dict[str, str]
) -> None:
    api = stack_env["NOETL_API_URL"]
    operator = keys["operator"]
    registered = call("POST", f"{api}/api/catalog", operator, json={"content": playbook("authz/operator")})
    assert registered.status_code in (200, 201), registered.text
    assert forbidden(call("GET", f"{api}/api/internal/ingress/{LISTENERS[0].listener}", operator))
    assert forbidden(call("POST", f"{api}/api/events", operator, json={}))


def test_maintenance_routes_are_the_schedulers_and_frames_are_the_workers(
    stack: LocalStack, keys: dict[str, str]
) -> None:
    frames = f"http://127.0.0.1:{stack.port_base + ROLE_PORTS['frames']}"
    projector = f"http://127.0.0.1:{stack.port_base + ROLE_PORTS['projector']}"
    drainer = f"http://127.0.0.1:{stack.port_base + ROLE_PORTS['spool_drainer']}"
    assert forbidden(call("POST", f"{frames}/api/internal/frames/reap", keys["worker"], json={}))
    assert call("POST", f"{frames}/api/internal/frames/reap", keys["scheduler"], json={}).status_code == 200
    assert forbidden(call("POST", f"{frames}/api/stages/1/frames/claim", keys["ingress"], json={}))
    assert forbidden(call("POST", f"{projector}/api/internal/projector/catch-up", keys["worker"], json={}))
    assert forbidden(call("POST", f"{drainer}/drain", keys["worker"], json={}))
    # the push tokens are not API tokens
    assert call("GET", f"{frames}/api/stages/1", keys["worker_push"]).status_code == 401
