"""The local stack with every role (``local up --roles all``; started here when missing), as the
operator's commands and the console see it: the control plane's URL and the stack's API token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from noetl_cloud.local.stack import LocalStack
from noetl_cloud.web.client import ApiClient, static_token
from tests import parallel
from tests.integration.control_fixtures import playbook

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def stack_env(local_env: dict[str, str]) -> dict[str, str]:
    """The stack's environment with its roles running: ``NOETL_API_URL``, ``NOETL_INTERNAL_API_TOKEN``."""
    state = os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))
    stack = LocalStack.from_env({**os.environ, "NOETL_LOCAL_STATE_DIR": state})
    with parallel.exclusive(Path(state), "stack"):  # one xdist worker at a time starts (or finds) them
        return stack.up(echo=lambda _line: None, roles=stack.available_roles())


@pytest.fixture(scope="session")
def stack_api(stack_env: dict[str, str]) -> ApiClient:
    """An API client of the stack's control plane, with a two-step noop playbook ``console/noop``."""
    api = ApiClient(stack_env["NOETL_API_URL"], token_source=static_token(stack_env["NOETL_INTERNAL_API_TOKEN"]))
    api.post("/api/catalog", json={"content": playbook("console/noop")}).raise_for_error()
    return api
