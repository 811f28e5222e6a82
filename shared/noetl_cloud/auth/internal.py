"""Authentication of callers of the internal ``/api/*`` routes.

Two modes, either or both:

* a shared bearer token (``NOETL_INTERNAL_API_TOKEN``), the local and test setup, compared in
  constant time;
* Google ID tokens of named service accounts, the Cloud Run setup (see
  :mod:`noetl_cloud.auth.google_oidc`).

With both configured, a presented token equal to the shared token is a bearer caller, any other
token shaped like a JWT is verified as a Google ID token, and anything else is a wrong token.
:func:`install` puts the check in front of every route under a prefix, so ``/healthz`` stays
open; failures propagate to the app's JSON error handlers.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from flask import Flask, g, request
from pydantic import SecretStr

from noetl_cloud.auth.google_oidc import JwksCache, verify_google_id_token
from noetl_cloud.errors import ConfigError, NoetlError, Unauthorized
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

BEARER_PRINCIPAL = "internal-api-token"

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_BEARER = re.compile(r"(?i:bearer) +(\S+) *")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who called: the service account email, or :data:`BEARER_PRINCIPAL` for the shared token."""

    principal: str
    method: Literal["bearer", "google_id_token"]


class MissingCredentials(Unauthorized):
    code = "missing_credentials"


class BadCredentials(Unauthorized):
    code = "bad_credentials"


class InternalAuth:
    """Authenticates ``Authorization`` headers of internal API calls.

    ``token`` enables the shared bearer token. ``audience`` enables Google ID tokens, which then
    need ``allowed_emails`` (any Google account can mint a token for any audience, so an
    audience alone authenticates nobody); ``keys`` defaults to Google's JWKS, fetched lazily.
    Raises :class:`~noetl_cloud.errors.ConfigError` when neither mode is configured.
    """

    def __init__(
        self,
        *,
        token: str | SecretStr | None = None,
        audience: str | Sequence[str] | None = None,
        allowed_emails: Collection[str] | None = None,
        keys: JwksCache | None = None,
        now: Callable[[], float] = time.time,
        leeway_s: int = 30,
    ) -> None:
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        self._token_digest = _digest(secret) if secret else None
        self._audience = audience or None
        self._allowed_emails: frozenset[str] | None = None
        if self._audience is not None:
            if isinstance(allowed_emails, str) or not allowed_emails:
                raise ConfigError(
                    "internal API Google ID-token mode needs the allowed service account emails",
                    code="config_missing",
                )
            self._allowed_emails = frozenset(allowed_emails)
        if self._token_digest is None and self._audience is None:
            raise ConfigError(
                "internal API has no authentication configured: set NOETL_INTERNAL_API_TOKEN "
                "or configure Google ID-token verification (audience and allowed service accounts)",
                code="config_missing",
                details={"variables": [Settings.env_name("internal_api_token")]},
            )
        self._keys = keys if keys is not None or self._audience is None else JwksCache()
        self._now = now
        self._leeway_s = leeway_s

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        audience: str | Sequence[str] | None = None,
        allowed_emails: Collection[str] | None = None,
        keys: JwksCache | None = None,
    ) -> InternalAuth:
        """Bearer mode from ``NOETL_INTERNAL_API_TOKEN``, plus ID-token mode when an audience is given."""
        return cls(token=settings.internal_api_token, audience=audience, allowed_emails=allowed_emails, keys=keys)

    @property
    def methods(self) -> tuple[str, ...]:
        """The enabled modes, for start-up logs."""
        enabled = []
        if self._token_digest is not None:
            enabled.append("bearer")
        if self._audience is not None:
            enabled.append("google_id_token")
        return tuple(enabled)

    def authenticate(self, authorization_header: str | None) -> Caller:
        """The caller an ``Authorization: Bearer <token>`` header proves.

        Raises ``missing_credentials`` (401) when the header is absent or not a bearer header,
        ``bad_credentials`` (401) for a wrong shared token, and the ``oidc_*`` errors of
        :func:`~noetl_cloud.auth.google_oidc.verify_google_id_token` for ID tokens.
        """
        match = _BEARER.fullmatch(authorization_header) if isinstance(authorization_header, str) else None
        if match is None:
            raise MissingCredentials("an 'Authorization: Bearer <token>' header is required")
        presented = match.group(1)
        if self._token_digest is not None and hmac.compare_digest(_digest(presented), self._token_digest):
            return Caller(BEARER_PRINCIPAL, "bearer")
        if self._audience is not None and (self._token_digest is None or _JWT_SHAPE.fullmatch(presented)):
            assert self._keys is not None
            identity = verify_google_id_token(
                presented,
                keys=self._keys,
                audience=self._audience,
                allowed_emails=self._allowed_emails,
                now=self._now,
                leeway_s=self._leeway_s,
            )
            return Caller(identity.email, "google_id_token")
        raise BadCredentials("the bearer token is not valid")


def _digest(value: str) -> bytes:
    # Comparing fixed-size digests keeps the comparison constant-time in the token's length too.
    return hashlib.sha256(value.encode("utf-8")).digest()


def install(app: Flask, auth: InternalAuth, *, prefix: str = "/api/") -> None:
    """Authenticate every request whose path is under ``prefix``; the caller lands in ``g.caller``.

    Errors are left to the app's JSON error handlers (``create_app`` registers them).
    """
    root = prefix.rstrip("/")

    @app.before_request
    def _authenticate_internal_caller() -> None:
        path = request.path
        if path != root and not path.startswith(prefix):
            return
        try:
            g.caller = auth.authenticate(request.headers.get("Authorization"))
        except NoetlError as exc:
            log.info("internal API call refused", extra={"error_code": exc.code, "path": path})
            raise
