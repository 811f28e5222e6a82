"""The runtime's HTTP face on ``$PORT``: ``/healthz`` (alive), ``/readyz`` (holding its
subscription), ``/status`` and ``/metrics``. Cloud Run needs the port answered; the loop itself
runs beside it (:mod:`noetl_cloud.runtime.bootstrap`)."""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask, Response
from werkzeug.serving import BaseWSGIServer, make_server

from noetl_cloud.errors import Unavailable
from noetl_cloud.observability import Counters
from noetl_cloud.runtime.service import SubscriptionRuntime
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app


class NotRunning(Unavailable):
    code = "runtime_not_running"


class NotReady(Unavailable):
    code = "runtime_not_ready"
    retry_after = 2


def build_app(settings: Settings, runtime: SubscriptionRuntime | None, counters: Counters | None = None) -> Flask:
    """``runtime`` is ``None`` where this process holds no subscription (no
    ``NOETL_SUBSCRIPTION_PATH``, or served by gunicorn, which runs no loop): ready never."""
    app = create_app("subscription_runtime", settings)
    metrics = counters or (runtime.counters if runtime is not None else Counters())

    @app.get("/readyz")
    def readyz() -> dict[str, Any]:
        if runtime is None:
            raise NotRunning("this process holds no subscription (set NOETL_SUBSCRIPTION_PATH; run main.py)")
        if not runtime.ready:
            raise NotReady(f"the runtime is {runtime.phase}", details=runtime.status())
        return {"status": "ready", **runtime.status()}

    @app.get("/status")
    def status() -> dict[str, Any]:
        return runtime.status() if runtime is not None else {"phase": "not_running"}

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(metrics.exposition(), mimetype="text/plain; version=0.0.4")

    return app


class HealthServer:
    """The app on a port, served from a daemon thread."""

    def __init__(self, app: Flask, port: int, host: str = "0.0.0.0") -> None:  # noqa: S104 - Cloud Run's port
        self.server: BaseWSGIServer = make_server(host, port, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(5)
