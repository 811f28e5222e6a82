"""The worker's port to the control plane: the JSON HTTP API of docs/distributed.md.

:class:`~noetl_cloud.web.client.ApiClient` is the production adapter (it already retries transient
failures and raises :class:`~noetl_cloud.web.client.UpstreamUnavailable` when it gives up);
:class:`~noetl_cloud.worker.memory.InMemoryControlPlane` is the in-memory one.

Routes the worker calls:

=================================================  =============================================
``POST /api/commands/{command_id}/claim``          ``{worker_id}`` → 200 command | 409 | 404
``POST /api/commands/{command_id}/heartbeat``      ``{worker_id}`` → 200 ``{lease_expires_at}`` | 409
``POST /api/events``                               the report → 200 ``{accepted, duplicate}`` | 409
``POST /api/execute``                              a child execution → 202 ``{execution_id, …}``
``GET /api/executions/{execution_id}``             ``{status, ctx, results, error, …}``
=================================================  =============================================
"""

from __future__ import annotations

from typing import Any, Protocol

from noetl_cloud.web.client import ApiResponse


class ControlPlaneApi(Protocol):
    """JSON calls to the control-plane API. Safe to call from several threads at once."""

    def get(self, path: str) -> ApiResponse:
        """``GET path``: the final answer, whatever its status; raises
        :class:`~noetl_cloud.web.client.UpstreamUnavailable` when the API cannot be reached."""
        ...

    def post(self, path: str, json: Any = None) -> ApiResponse:
        """``POST path`` with a JSON body: the final answer, whatever its status; raises
        :class:`~noetl_cloud.web.client.UpstreamUnavailable` when the API cannot be reached."""
        ...


def error_code(response: ApiResponse) -> str | None:
    """The ``error.code`` of a JSON error answer, if it has one."""
    body = response.json
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def error_message(response: ApiResponse) -> str:
    """The ``error.message`` of a JSON error answer, or a message naming the status."""
    body = response.json
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else f"the API answered {response.status}"
