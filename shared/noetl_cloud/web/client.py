"""The client other roles use to call the control-plane API.

Every call of the control-plane API is idempotent by design (writes carry dedup keys, claims
are conditional), so :class:`ApiClient` retries any method after connection errors, timeouts,
``502``/``503``/``504`` and ``429`` (waiting out ``Retry-After`` when the server sends one and it
is within a cap). ``500`` is a bug on the other side and is not retried. When retries are
exhausted the call raises :class:`UpstreamUnavailable` (503 ``upstream_unavailable``, retryable),
so an at-least-once caller redelivers later. Any other answer, 4xx included, is returned as an
:class:`ApiResponse`; :meth:`ApiResponse.raise_for_error` turns the JSON error model into the
matching :class:`~noetl_cloud.errors.NoetlError`.

Calls carry the current W3C trace (a child span of it) and request id, and a bearer token from a
token source: :func:`static_token` locally, :func:`~noetl_cloud.web.id_tokens.google_id_token_source` on
Cloud Run.
"""

from __future__ import annotations

import email.utils
import http.client
import json as jsonlib
import logging
import math
import random
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from noetl_cloud.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NoetlError,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from noetl_cloud.observability import current_request_id, current_trace
from noetl_cloud.web.errors import HTTP_CODES
from noetl_cloud.web.transport import ConnectionPool

log = logging.getLogger(__name__)

TokenSource = Callable[[], str]

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})

# Transport failures worth another attempt (refused, reset, timed out, cut short). Certificate
# errors are not: they do not heal.
_NOT_RETRYABLE: tuple[type[Exception], ...] = (ssl.SSLCertVerificationError,)
_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (OSError, http.client.HTTPException)

_ERROR_CLASSES: dict[int, type[NoetlError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationFailed,
    503: Unavailable,
}


def _encode(value: Any) -> bytes:
    """Compact UTF-8 JSON: a non-ASCII body keeps its size (``\\u`` escapes would triple it). A
    string holding a lone surrogate has no UTF-8 form: only then the escaped form is sent."""
    try:
        return jsonlib.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return jsonlib.dumps(value, separators=(",", ":")).encode("ascii")


def segment(value: object) -> str:
    """``value`` as one percent-encoded path segment: every call that puts a name or an id into a
    path goes through this, so a ``?``, ``#``, ``/`` or space in it cannot end the path or add one."""
    return urllib.parse.quote(str(value), safe="")


class UpstreamUnavailable(Unavailable):
    """The API could not be reached or kept answering "try later" until the retries ran out."""

    code = "upstream_unavailable"

    def __init__(
        self, message: str, *, code: str | None = None, details: Any = None, retry_after: int | None = None
    ) -> None:
        super().__init__(message, code=code, details=details)
        # Read by the JSON error handlers, which pass it on as ``Retry-After``.
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """A final answer of the API: status, parsed JSON body (``None`` when not JSON) and headers."""

    status: int
    json: Any
    headers: Mapping[str, str] = field(repr=False)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 400

    def raise_for_error(self) -> ApiResponse:
        """Return ``self`` when the status is below 400, else raise the error the body describes.

        The raised :class:`~noetl_cloud.errors.NoetlError` has the response's status and the
        ``code``/``message``/``details`` of its ``{"error": {...}}`` body (a code derived from the
        status when the body is not the error model).
        """
        if self.status < 400:
            return self
        error = self.json.get("error") if isinstance(self.json, dict) else None
        if not isinstance(error, dict):
            error = {}
        code = error.get("code")
        if not isinstance(code, str) or not code:
            code = HTTP_CODES.get(self.status, f"http_{self.status}")
        message = error.get("message")
        if not isinstance(message, str) or not message:
            message = f"the API answered {self.status}"
        cls = _ERROR_CLASSES.get(self.status, NoetlError)
        exc = cls(message, code=code, details=error.get("details"))
        exc.status = self.status
        exc.retryable = self.status in RETRYABLE_STATUSES
        raise exc


class ApiClient:
    """A pooled, retrying JSON client of the control-plane API at ``base_url``.

    All API calls are idempotent by design (dedup keys, conditional claims), which is what makes
    retrying every method safe. ``retries`` is the number of attempts after the first;
    waits grow as ``backoff_s * 2**n`` (with jitter, capped at ``max_backoff_s``), and a
    ``Retry-After`` of a 429/503 is waited out when it is at most ``max_retry_after_s``, and ends
    the retries otherwise. ``sleep`` and ``jitter`` (a number in [0, 1)) are injectable for tests.
    Safe to share between threads.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token_source: TokenSource | None,
        timeout_s: float = 10,
        retries: int = 3,
        backoff_s: float = 0.2,
        pool_maxsize: int = 16,
        max_backoff_s: float = 5.0,
        max_retry_after_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self._base_path = parsed.path.rstrip("/")
        self._token_source = token_source
        self._retries = retries
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._max_retry_after_s = max_retry_after_s
        self._sleep = sleep
        self._jitter = jitter
        self._pool = ConnectionPool(f"{parsed.scheme}://{parsed.netloc}", timeout_s=timeout_s, maxsize=pool_maxsize)

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def get(self, path: str, *, headers: Mapping[str, str] | None = None) -> ApiResponse:
        """``GET path``; see :meth:`request`."""
        return self.request("GET", path, headers=headers)

    def post(self, path: str, json: Any = None, *, headers: Mapping[str, str] | None = None) -> ApiResponse:
        """``POST path`` with a JSON body; see :meth:`request`."""
        return self.request("POST", path, json=json, headers=headers)

    def request(
        self, method: str, path: str, json: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        """Send one API call, retrying transient failures; the final answer as an :class:`ApiResponse`.

        ``path`` is relative to ``base_url`` and must start with ``/`` (an absolute URL would send
        the token elsewhere). Raises :class:`UpstreamUnavailable` when retries are exhausted.
        """
        if not path.startswith("/") or path.startswith("//"):
            raise ValueError(f"path must start with a single '/', got {path!r}")
        target = self._base_path + path
        body = None if json is None else _encode(json)
        given = {k.lower(): v for k, v in (headers or {}).items()}

        attempts = self._retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                raw = self._pool.request(method, target, body, self._headers(given, has_body=body is not None))
            except _NOT_RETRYABLE:
                raise
            except _RETRYABLE_ERRORS as exc:
                reason = type(exc).__name__
                log.warning(
                    "API call failed",
                    extra={"method": method, "path": path, "attempt": attempt + 1, "reason": reason},
                )
                if last:
                    raise UpstreamUnavailable(
                        "the API could not be reached",
                        details={"method": method, "path": path, "attempts": attempts, "reason": reason},
                    ) from None
                self._sleep(self._backoff(attempt))
                continue

            response = ApiResponse(raw.status, _parse_json(raw.data), raw.headers)
            if raw.status not in RETRYABLE_STATUSES:
                return response
            log.warning(
                "API call answered a retryable status",
                extra={"method": method, "path": path, "attempt": attempt + 1, "status": raw.status},
            )
            retry_after = _retry_after_s(raw.headers.get("Retry-After")) if raw.status in (429, 503) else None
            too_long = retry_after is not None and retry_after > self._max_retry_after_s
            if last or too_long:
                raise UpstreamUnavailable(
                    f"the API answered {raw.status}",
                    details={"method": method, "path": path, "attempts": attempt + 1, "status": raw.status},
                    retry_after=None if retry_after is None else math.ceil(retry_after),
                )
            self._sleep(retry_after if retry_after is not None else self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _headers(self, given: Mapping[str, str], *, has_body: bool) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if has_body:
            headers["content-type"] = "application/json"
        if self._token_source is not None and "authorization" not in given:
            headers["authorization"] = f"Bearer {self._token_source()}"
        trace = current_trace.get()
        if trace is not None and "traceparent" not in given:
            headers.update(trace.outgoing())
        request_id = current_request_id.get()
        if request_id and "x-request-id" not in given:
            headers["x-request-id"] = request_id
        headers.update(given)
        return headers

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self._max_backoff_s, self._backoff_s * 2.0**attempt)
        return ceiling / 2 + ceiling / 2 * self._jitter()


def _parse_json(data: bytes) -> Any:
    if not data:
        return None
    try:
        return jsonlib.loads(data)
    except ValueError:
        return None


def _retry_after_s(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


# -- token sources -------------------------------------------------------------------------------


def static_token(token: str) -> TokenSource:
    """A token source that always returns ``token`` (the shared internal API token)."""
    if not token:
        raise ValueError("token must not be empty")
    return lambda: token


__all__ = [
    "ApiClient",
    "ApiResponse",
    "TokenSource",
    "UpstreamUnavailable",
    "static_token",
]
