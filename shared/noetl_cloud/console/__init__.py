"""The operators' web console: static HTML, CSS and JavaScript served by the control plane under ``/console/``.

No build step and nothing fetched from the network: the files in ``static/`` are what the browser runs,
and every datum comes from the control plane's own ``/api/*`` (the executions API, docs/api.md) through
same-origin ``fetch`` calls. The pages carry no data of their own, but they sit behind the same internal
auth as ``/api/*`` (the app installs it for ``/console/`` too): whoever can open the console can call
the API, and nobody else (docs/console.md says how an operator's browser presents the credentials).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from flask import Blueprint, Response, redirect, send_from_directory

STATIC = Path(str(files("noetl_cloud.console") / "static"))

#: The pages load nothing but their own files and call nothing but their own origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def blueprint() -> Blueprint:
    """``GET /console`` (a redirect), ``/console/`` (the page) and ``/console/<file>`` (its assets)."""
    bp = Blueprint("console", __name__)

    @bp.get("/console")
    def console_root() -> Response:
        return redirect("/console/", code=308)  # type: ignore[return-value]

    @bp.get("/console/")
    def console_page() -> Response:
        return _secured(send_from_directory(STATIC, "index.html"))

    @bp.get("/console/<path:name>")
    def console_asset(name: str) -> Response:
        return _secured(send_from_directory(STATIC, name))

    return bp


def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response
