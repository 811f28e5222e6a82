"""``/api/spool/*`` on the control plane: forwarded to the spool drainer, which holds the spool.

The console is served by the control plane and calls its own origin only (its Content-Security-Policy
says ``connect-src 'self'``), while the spool, its backends and its circuits are the drainer's
(``NOETL_SPOOL_DRAINER_URL``). So the control plane forwards these routes, as they are, to the same
paths on the drainer, with the caller's own ``Authorization`` header: the control plane admits
operators only (``auth/roles.py``) and the drainer authenticates and authorizes the same caller again
by its own policy, so forwarding adds no authority (in Google Cloud the drainer accepts ID tokens
minted for the control plane's URL as well as its own, for exactly this). docs/console.md argues it.

Errors: a POST body that is not a JSON object is 400 ``invalid_json`` (before anything is forwarded); no
drainer configured is 503 ``spool_drainer_not_configured``; a drainer that does not answer
503 ``spool_drainer_unavailable``; the drainer's own answers (its JSON errors) pass through unchanged.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Final

import urllib3
from flask import Blueprint, Response, request

from noetl_cloud.errors import BadRequest, NotFound, PayloadTooLarge, Unavailable
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY: Final = 64 * 1024
#: "drain now" drains in the request (the drainer's budget is 240 s by default).
READ_TIMEOUT_S: Final = 290.0
PASSED_HEADERS: Final = ("Content-Type", "Cache-Control", "Retry-After")
#: The drainer's spool paths: words and dashes, no dot segment (nothing else of the drainer is reachable).
_REST: Final = re.compile(r"[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*")


class DrainerNotConfigured(Unavailable):
    code = "spool_drainer_not_configured"


class DrainerUnavailable(Unavailable):
    code = "spool_drainer_unavailable"
    retry_after = 10


def blueprint(settings: Settings) -> Blueprint:
    bp = Blueprint("spool_proxy", __name__)
    pool = urllib3.PoolManager(maxsize=4, timeout=urllib3.Timeout(connect=5.0, read=READ_TIMEOUT_S), retries=False)

    def forward(rest: str) -> Response:
        if not _REST.fullmatch(rest):
            raise NotFound(f"no spool route /api/spool/{rest}", code="route_not_found")
        if (request.content_length or 0) > MAX_BODY:
            raise PayloadTooLarge(f"a spool request body is at most {MAX_BODY} bytes")
        body = None
        if request.method == "POST":  # the caller's error before anything is forwarded (as json_body says it)
            data = request.get_json(silent=True, force=True)
            if not isinstance(data, dict):
                raise BadRequest("request body must be a JSON object", code="invalid_json")
            body = json.dumps(data).encode()
        base = settings.spool_drainer_url
        if not base:
            raise DrainerNotConfigured("no spool drainer is configured (NOETL_SPOOL_DRAINER_URL)")
        headers = {"Accept": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        if body is not None:
            headers["Content-Type"] = "application/json"
        url = base.rstrip("/") + "/api/spool/" + rest
        query = request.query_string.decode("latin-1")
        if query:
            url += "?" + query
        try:
            answer = pool.request(request.method, url, body=body, headers=headers, redirect=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("the spool drainer did not answer", extra={"error_type": type(exc).__name__})
            raise DrainerUnavailable("the spool drainer did not answer") from None
        passed = {name: answer.headers[name] for name in PASSED_HEADERS if name in answer.headers}
        return Response(answer.data, status=answer.status, headers=passed)

    @bp.get("/api/spool/<path:rest>")
    def spool_get(rest: str) -> Response:
        return forward(rest)

    @bp.post("/api/spool/<path:rest>")
    def spool_post(rest: str) -> Response:
        return forward(rest)

    return bp
