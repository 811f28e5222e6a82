"""Google ID tokens for calling another role on Cloud Run, through google-auth.

:func:`google_id_token_source` asks google-auth for ID-token credentials for an audience
(:func:`google.oauth2.id_token.fetch_id_token_credentials`: a service-account key named by
``GOOGLE_APPLICATION_CREDENTIALS``, else the metadata server of Cloud Run, Cloud Functions and
Compute Engine), mints lazily on the first call, and reuses a token until ``refresh_margin_s`` before
it expires. Tokens come from where google-auth finds them; nothing here reads the metadata server.
google-auth (and the ``requests`` transport it mints through) is imported on the first mint, not at
start: a role's cold start does not pay for it (``tests/unit/test_ingress_imports.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from noetl_cloud.errors import Unavailable
from noetl_cloud.web.client import TokenSource

#: ``(audience, request) -> credentials`` with ``refresh(request)``, ``token`` and ``expiry``.
CredentialsFor = Callable[[str, Any], Any]


class _IdTokens:
    def __init__(
        self, audience: str, credentials_for: CredentialsFor | None, clock: Callable[[], float], margin_s: float
    ) -> None:
        self._audience = audience
        self._credentials_for = credentials_for
        self._clock = clock
        self._margin = margin_s
        self._lock = threading.Lock()
        self._credentials: Any = None
        self._request: Any = None
        self._token: str | None = None
        self._refresh_at = float("-inf")

    def __call__(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._token, expires = self._mint()
                self._refresh_at = expires - self._margin
            return self._token

    def _mint(self) -> tuple[str, float]:
        import google.auth.exceptions
        from google.auth.transport.requests import Request
        from google.oauth2.id_token import fetch_id_token_credentials

        try:
            if self._request is None:
                self._request = Request()
            if self._credentials is None:
                credentials_for = self._credentials_for or fetch_id_token_credentials
                self._credentials = credentials_for(self._audience, self._request)
            self._credentials.refresh(self._request)
        except google.auth.exceptions.GoogleAuthError as exc:
            raise Unavailable(
                "could not get an ID token for the control plane",
                code="id_token_unavailable",
                details={"reason": type(exc).__name__},
            ) from None
        token, expiry = self._credentials.token, self._credentials.expiry
        if not isinstance(token, str) or not token or expiry is None:
            raise Unavailable("google-auth returned no ID token or no expiry", code="id_token_unavailable")
        # google-auth keeps expiries as naive datetimes in UTC.
        return token, expiry.replace(tzinfo=UTC).timestamp()


def google_id_token_source(
    audience: str,
    *,
    credentials_for: CredentialsFor | None = None,
    clock: Callable[[], float] = time.time,
    refresh_margin_s: float = 300.0,
) -> TokenSource:
    """A token source of Google ID tokens for ``audience``, reused until ``refresh_margin_s`` (5 minutes)
    before they expire; ``credentials_for`` defaults to google-auth's ``fetch_id_token_credentials``.
    Raises :class:`~noetl_cloud.errors.Unavailable` (``id_token_unavailable``) when google-auth cannot
    find credentials or mint a token."""
    if not audience:
        raise ValueError("audience must not be empty")
    return _IdTokens(audience, credentials_for, clock, refresh_margin_s)
