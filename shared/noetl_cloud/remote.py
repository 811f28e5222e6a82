"""Start an execution through the control plane's API and follow it to its end: ``noetl-cloud execute``.

The target is a catalog path (``demo/fetch``), or a playbook file, which is registered first (registering
unchanged content is a no-op) and then run by its catalog path. The API is ``NOETL_API_URL`` with the
bearer ``NOETL_INTERNAL_API_TOKEN`` (what ``noetl-cloud local env`` exports after ``make up``), or a
Google ID token for ``NOETL_INTERNAL_API_AUDIENCE`` when no token is set.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from noetl_cloud.errors import BadRequest, ConfigError, Unavailable
from noetl_cloud.web.client import ApiClient, TokenSource, segment, static_token
from noetl_cloud.web.id_tokens import google_id_token_source

ENDED = ("completed", "failed", "cancelled")


def api_from_env(env: Mapping[str, str], url: str | None = None) -> ApiClient:
    """The API client ``noetl-cloud execute`` uses."""
    base, source = credentials_from_env(env, url)
    return ApiClient(base, token_source=source, timeout_s=30)


def credentials_from_env(env: Mapping[str, str], url: str | None = None) -> tuple[str, TokenSource]:
    """The control plane's URL and the token source of the operator's commands (and the console proxy)."""
    base = url or env.get("NOETL_API_URL")
    if not base:
        raise ConfigError(
            'no control plane: set NOETL_API_URL (after `make up`: eval "$(noetl-cloud local env)") or pass --api-url'
        )
    token = env.get("NOETL_INTERNAL_API_TOKEN")
    source = static_token(token) if token else google_id_token_source(env.get("NOETL_INTERNAL_API_AUDIENCE") or base)
    return base, source


def catalog_path(api: ApiClient, target: str) -> str:
    """The catalog path of ``target``: a playbook file is registered first; anything else is a path."""
    file = Path(target)
    if not file.is_file():
        if target.endswith((".yaml", ".yml")):
            raise BadRequest(f"no playbook file at {target}", code="usage")
        return target
    registered = api.post("/api/catalog", json={"content": file.read_text(encoding="utf-8")}).raise_for_error()
    return str(registered.json["path"])


def start(api: ApiClient, path: str, workload: Mapping[str, Any], pool: str | None = None) -> dict[str, Any]:
    """``POST /api/execute``; the answer (``execution_id``, ``status``, ``execution_pool``)."""
    body: dict[str, Any] = {"path": path, "workload": dict(workload)}
    if pool:
        body["execution_pool"] = pool
    return api.post("/api/execute", json=body).raise_for_error().json  # type: ignore[no-any-return]


#: How long one long poll of the events waits (the API client's timeout, 30 s, outlasts it).
WAIT_S = 20
#: The events a running playbook reports as progress.
STEP_EVENTS = ("step.done", "step.failed", "loop.done", "step.denied")


def follow_events(
    api: ApiClient,
    execution_id: str,
    emit: Callable[[dict[str, Any]], None],
    *,
    timeout_s: float = 600.0,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Hand each event of the execution to ``emit`` as it is appended (the events API's long poll,
    ``after=`` the last one seen), until the execution ended; its final status."""
    deadline = clock() + timeout_s
    after: str | None = None
    while True:
        query = {"wait": str(WAIT_S), **({"after": after} if after else {})}
        answer = api.get(
            f"/api/executions/{segment(execution_id)}/events?{urllib.parse.urlencode(query)}"
        ).raise_for_error()
        body = answer.json
        for event in body["events"]:
            emit(event)
        after = body["next_after"]
        if body["ended"] and not body["more"]:
            return str(body["status"])
        if clock() >= deadline:
            raise Unavailable(
                f"execution {execution_id} is still {body['status']} after {timeout_s:g} s",
                code="wait_timeout",
                details={"execution_id": execution_id},
            )


def follow(
    api: ApiClient,
    execution_id: str,
    *,
    timeout_s: float = 600.0,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Follow the execution until it ends; each step event goes to ``on_step``. Its final resource."""

    def emit(event: dict[str, Any]) -> None:
        if on_step is not None and event["event_type"] in STEP_EVENTS:
            on_step(event)

    follow_events(api, execution_id, emit, timeout_s=timeout_s, clock=clock)
    return api.get(f"/api/executions/{segment(execution_id)}").raise_for_error().json  # type: ignore[no-any-return]
