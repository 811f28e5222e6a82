"""The package's one exception base and its families.

Every error a caller can see carries an HTTP status and a stable ``code``; the web layer turns
them into ``{"error": {"code", "message", "details"}}``. ``retryable`` says what delivery
semantics the error has: a retryable failure is answered 5xx so an at-least-once source
redelivers; a permanent one is 4xx (or dead-lettered) and is never retried forever.
"""

from __future__ import annotations

from typing import Any


class NoetlError(Exception):
    """Base of every error this package raises on purpose."""

    status: int = 500
    code: str = "internal_error"
    retryable: bool = False

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return body


class ConfigError(NoetlError):
    """Configuration is missing or invalid; raised at start, never mid-request."""

    status = 500
    code = "config_error"


class BadRequest(NoetlError):
    status = 400
    code = "bad_request"


class Unauthorized(NoetlError):
    status = 401
    code = "unauthorized"


class Forbidden(NoetlError):
    status = 403
    code = "forbidden"


class NotFound(NoetlError):
    status = 404
    code = "not_found"


class Conflict(NoetlError):
    status = 409
    code = "conflict"


class PayloadTooLarge(NoetlError):
    status = 413
    code = "payload_too_large"


class ValidationFailed(NoetlError):
    status = 422
    code = "validation_failed"


class Unavailable(NoetlError):
    """A dependency is down; the caller should retry later."""

    status = 503
    code = "unavailable"
    retryable = True
