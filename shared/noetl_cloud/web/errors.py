"""The JSON error model: ``{"error": {"code", "message", "details"}}`` with stable codes.

Known errors (:class:`~noetl_cloud.errors.NoetlError`) answer with their own status and code;
Werkzeug's HTTP errors (404, 405, 413, ...) answer with a code derived from their status; any
other exception is a bug: it is logged with its traceback and answered 500 ``internal_error``
without its text, which could carry data a caller must not see.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from noetl_cloud.errors import NoetlError, ValidationFailed

log = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "rate_limited",
    500: "internal_error",
    501: "not_implemented",
    503: "unavailable",
}


def error_response(status: int, code: str, message: str, details: Any = None) -> tuple[Response, int]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return jsonify({"error": body}), status


def validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    """Field paths and messages of a pydantic error, without the rejected input values."""
    return [
        {"field": ".".join(str(part) for part in err["loc"]) or "$", "problem": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]


def validation_failed(exc: ValidationError, message: str = "request body failed validation") -> ValidationFailed:
    return ValidationFailed(message, details=validation_details(exc))


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(NoetlError)
    def _known(exc: NoetlError) -> tuple[Response, int]:
        if exc.status >= 500:
            log.warning("request failed: %s", exc.code, extra={"error_code": exc.code})
        response, status = error_response(exc.status, exc.code, exc.message, exc.details)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        return response, status

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> tuple[Response, int]:
        status = exc.code or 500
        return error_response(status, HTTP_CODES.get(status, f"http_{status}"), exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> tuple[Response, int]:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "internal error")
