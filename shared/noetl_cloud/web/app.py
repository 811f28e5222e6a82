"""App factory: one Flask app per role with the common request pipeline.

Every app gets: the JSON error model, a request-size limit (``413 payload_too_large``) checked
from ``Content-Length`` before the body is read and, for a body without one (chunked), while it
is read: a body one byte over the limit is refused whole, never cut and processed. The limit is
the role's ``max_request_bytes`` unless a route says otherwise (:func:`body_limit`). JSON bodies
are parsed with bounded nesting (:mod:`noetl_cloud.jsonsafe`: too deep is malformed, a 400). Also a
request id (``X-Request-Id``, echoed back), the W3C trace context of the request
(``traceparent``/``tracestate``/``baggage``, or Cloud Run's ``X-Cloud-Trace-Context``) in context
variables for logs and downstream calls, ``GET /healthz``, and ``GET /api/openapi.json``: the role's
OpenAPI document (:mod:`noetl_cloud.openapi`), behind whatever authentication the role puts on ``/api/``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import IO, Any, TypeVar

from flask import Flask, Response, g, request
from flask import Request as FlaskRequest
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel, ValidationError
from werkzeug.routing import BaseConverter, IntegerConverter, Map
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream, get_input_stream

from noetl_cloud import jsonsafe, telemetry
from noetl_cloud.errors import BadRequest, PayloadTooLarge
from noetl_cloud.observability import (
    TraceContext,
    current_request_id,
    current_trace,
)
from noetl_cloud.settings import Settings
from noetl_cloud.spec.common import LISTENER_NAME
from noetl_cloud.web.errors import register_error_handlers, validation_failed

M = TypeVar("M", bound=BaseModel)
V = TypeVar("V", bound=Callable[..., Any])

#: The largest body a listener may take (``ingress.max_body_bytes``, the spec's bound).
MAX_LISTENER_BODY = 32 * 1024 * 1024
#: The largest request carrying one delivery onward (``POST /api/execute`` from the ingress, the
#: spool drainer, a pull runtime): a listener's body as JSON inside the workload, with its headers
#: and meta. Re-encoding may grow a body (binary data as base64 is 4/3 of it, a JSON number written
#: ``1E9`` comes back as ``1000000000.0``), hence twice the largest body; beyond that the control
#: plane answers 413, a permanent refusal (dead-lettered for Pub/Sub push), never a retry.
MAX_FORWARD_BYTES = 2 * MAX_LISTENER_BODY

#: Roles whose requests are Pub/Sub pushes: their handlers open the span, from the message's attributes.
_PUSHED_ROLES = frozenset({"worker", "projector"})
#: The public edge: its spans start a new trace whatever ``traceparent`` a caller sends.
_PUBLIC_ROLES = frozenset({"ingress"})

_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{32})/(\d+)")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def trace_from_headers(headers: Any) -> TraceContext | None:
    """The caller's trace: W3C headers first, then Cloud Run's ``X-Cloud-Trace-Context``."""
    trace = TraceContext.parse(headers.get("traceparent"), headers.get("tracestate"), headers.get("baggage"))
    if trace is not None:
        return trace
    match = _CLOUD_TRACE.match(headers.get("X-Cloud-Trace-Context", ""))
    if match and match.group(1) != "0" * 32:
        span = int(match.group(2)) & ((1 << 64) - 1)
        if span:
            return TraceContext(match.group(1).lower(), f"{span:016x}")
    return None


class IdConverter(IntegerConverter):
    """``<int:...>`` in our routes: ids are bigints, so a number past 2**63 - 1 is 404, not a database error."""

    def __init__(self, url_map: Map, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("max", 2**63 - 1)
        super().__init__(url_map, *args, **kwargs)  # type: ignore[arg-type]


class ListenerConverter(BaseConverter):
    """``<listener:...>``: exactly the names a subscription can register. Any other segment (a
    decoded ``%3F`` or ``%23``, a space, CR/LF, upper case) matches no route, so it is a 404 before
    a handler, a cache, a rate bucket or a metric label ever sees it."""

    regex = LISTENER_NAME


class BoundedStream(LimitedStream):
    """A request body without ``Content-Length`` that holds at most ``limit`` bytes, and says so.

    Werkzeug's stream for such a body stops at ``max_content_length`` and returns what it read, so a
    longer body arrived cut at the limit and was processed. This one reads one byte past the limit
    and refuses the request (413) when that byte exists."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        super().__init__(stream, limit + 1, is_max=True)
        self.max_bytes = limit

    def readinto(self, b: Any) -> int | None:
        count = super().readinto(b)
        if self._pos > self.max_bytes:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {self.max_bytes} bytes", details={"limit_bytes": self.max_bytes}
            )
        return count


class Request(FlaskRequest):
    """Flask's request with a body stream that never hands a handler a body cut at the limit."""

    @cached_property
    def stream(self) -> IO[bytes]:
        limit = self.max_content_length
        if self.content_length is None and limit is not None and "wsgi.input_terminated" in self.environ:
            return BoundedStream(self.environ["wsgi.input"], limit)  # type: ignore[return-value]
        return get_input_stream(self.environ, max_content_length=limit)


class JsonProvider(DefaultJSONProvider):
    """Flask's JSON with :func:`noetl_cloud.jsonsafe.loads`: ``request.get_json`` sees a body nested
    too deep as malformed JSON (400), never a ``RecursionError`` (500)."""

    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return jsonsafe.loads(s)


def body_limit(limit: int) -> Callable[[V], V]:
    """Route decorator (under ``@app.post``): this route takes bodies up to ``limit`` bytes instead
    of the role's ``max_request_bytes``."""

    def mark(view: V) -> V:
        view.max_body_bytes = limit  # type: ignore[attr-defined]
        return view

    return mark


def create_app(role: str, settings: Settings) -> Flask:
    app = Flask(f"noetl_cloud.{role}", static_folder=None)
    app.request_class = Request
    app.json = JsonProvider(app)
    app.url_map.converters["int"] = IdConverter
    app.url_map.converters["listener"] = ListenerConverter
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.config["NOETL_SETTINGS"] = settings
    app.config["NOETL_ROLE"] = role  # the service whose routes noetl_cloud.auth.roles.POLICY lists
    register_error_handlers(app)
    telemetry.configure(settings, role)
    spanned = role not in _PUSHED_ROLES

    @app.before_request
    def _begin() -> None:
        view = app.view_functions.get(request.endpoint or "")
        limit = int(getattr(view, "max_body_bytes", settings.max_request_bytes))
        request.max_content_length = limit  # also bounds a body without Content-Length (Request.stream)
        length = request.content_length
        if length is not None and length > limit:
            raise PayloadTooLarge(
                f"request body of {length} bytes exceeds the limit of {limit}", details={"limit_bytes": limit}
            )
        supplied = request.headers.get("X-Request-Id", "")
        # A correlation id, not a secret: the process's PRNG, not a system call per request.
        request_id = supplied if _REQUEST_ID.match(supplied) else f"{random.getrandbits(64):016x}"
        g.request_id = request_id
        g.trace = trace_from_headers(request.headers)
        g._tokens = (current_request_id.set(request_id), current_trace.set(g.trace))
        if spanned and telemetry.tracing() and request.path != "/healthz":  # probes make no traces
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            traceparent = None if role in _PUBLIC_ROLES else request.headers.get("traceparent")
            parent = (
                {"traceparent": traceparent, "tracestate": request.headers.get("tracestate", "")}
                if traceparent
                else None
            )
            g._span_end = telemetry.server_span(f"{request.method} {route}", parent, {"http.route": route})

    @app.after_request
    def _end(response: Response) -> Response:
        response.headers["X-Request-Id"] = g.get("request_id", "")
        if "_span_end" in g:
            telemetry.annotate(**{"http.response.status_code": response.status_code})
        return response

    @app.teardown_request
    def _reset(_exc: BaseException | None) -> None:
        end_span = g.pop("_span_end", None)
        if end_span is not None:
            end_span(_exc)
        tokens = g.pop("_tokens", None)
        if tokens is not None:
            current_request_id.reset(tokens[0])
            current_trace.reset(tokens[1])

    @app.get("/healthz")
    def _healthz() -> dict[str, str]:
        return {"status": "ok", "role": role}

    @app.get("/api/openapi.json", endpoint="openapi")
    def _openapi() -> dict[str, Any]:
        from noetl_cloud.openapi import document_for  # the registry imports every role's models

        return document_for(app)

    return app


def json_body(model: type[M]) -> M:
    """The request's JSON body validated as ``model``: 400 when it is not a JSON object, 422
    with the failing field paths when it does not validate."""
    data = request.get_json(silent=True, force=True)
    if not isinstance(data, dict):
        raise BadRequest(
            f"request body must be a JSON object (UTF-8, nested at most {jsonsafe.MAX_DEPTH} levels)",
            code="invalid_json",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_failed(exc) from None
