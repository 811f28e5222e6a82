"""A WSGI app built on its first request, so importing an entry point connects to nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Request
from flask.typing import ResponseReturnValue


class LazyApp:
    def __init__(self, factory: Callable[[], Flask]) -> None:
        self._factory = factory
        self._app: Flask | None = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Flask:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._factory()
        return self._app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """WSGI: ``gunicorn main:app``."""
        return self.app(environ, start_response)

    def dispatch(self, request: Request) -> ResponseReturnValue:
        """functions-framework: route a request the framework received through this app."""
        app = self.app
        with app.request_context(request.environ):
            return app.full_dispatch_request()
