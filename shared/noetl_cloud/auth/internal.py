"""Authentication of callers of the internal ``/api/*`` routes.

Two modes, either or both, each mapping the caller to its caller roles (:mod:`noetl_cloud.auth.roles`):

* bearer tokens, the local and test setup, compared by their SHA-256 digests: one token per purpose
  (``NOETL_INTERNAL_API_TOKEN_DIGESTS``, ``<role>=<sha256 hex>`` entries: the process holds digests,
  never the other roles' tokens), or, with no digests, the process's own ``NOETL_INTERNAL_API_TOKEN``
  as a single shared token holding every caller role (test harnesses, docker compose);
* Google ID tokens of named service accounts, the Cloud Run setup (see
  :mod:`noetl_cloud.auth.google_oidc`): ``NOETL_INTERNAL_API_CALLERS``, ``<role>=<email>`` entries.

With both configured, a presented token with a known digest is a bearer caller, any other token
shaped like a JWT is verified as a Google ID token, and anything else is a wrong token.
:func:`install` puts authentication, then authorization by :data:`~noetl_cloud.auth.roles.POLICY`,
in front of every route under a prefix, so ``/healthz`` stays open; failures propagate to the app's
JSON error handlers (401 for credentials, 403 ``forbidden_role`` for a role the route does not admit).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from flask import Flask, g, request
from pydantic import SecretStr

from noetl_cloud.auth import roles as caller_roles
from noetl_cloud.auth.google_oidc import JwksCache, verify_google_id_token
from noetl_cloud.errors import ConfigError, NoetlError, Unauthorized
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

BEARER_PRINCIPAL = "internal-api-token"

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_BEARER = re.compile(r"(?i:bearer) +(\S+) *")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who called: the service account email, or :data:`BEARER_PRINCIPAL` (``:<role>`` for a
    per-purpose token); and the caller roles that identity holds."""

    principal: str
    method: Literal["bearer", "google_id_token"]
    roles: frozenset[str] = field(default=frozenset())


class MissingCredentials(Unauthorized):
    code = "missing_credentials"


class BadCredentials(Unauthorized):
    code = "bad_credentials"


class InternalAuth:
    """Authenticates ``Authorization`` headers of internal API calls and names the caller's roles.

    ``token`` enables one shared bearer token, which holds ``roles`` (default: every caller role);
    ``token_digests`` (SHA-256 hex digest → roles) enables one token per purpose. ``audience``
    enables Google ID tokens, which then need the accounts: ``callers`` (email → roles) and/or
    ``allowed_emails``, which hold ``roles`` (any Google account can mint a token for any audience,
    so an audience alone authenticates nobody); ``keys`` defaults to Google's JWKS, fetched lazily.
    Raises :class:`~noetl_cloud.errors.ConfigError` when no mode is configured.
    """

    def __init__(
        self,
        *,
        token: str | SecretStr | None = None,
        roles: Collection[str] = caller_roles.EVERY_ROLE,
        token_digests: Mapping[str, Collection[str]] | None = None,
        audience: str | Sequence[str] | None = None,
        allowed_emails: Collection[str] | None = None,
        callers: Mapping[str, Collection[str]] | None = None,
        keys: JwksCache | None = None,
        now: Callable[[], float] = time.time,
        leeway_s: int = 30,
    ) -> None:
        held = frozenset(roles)
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        self._bearer: dict[bytes, frozenset[str]] = {}
        self._bearer_principal: dict[bytes, str] = {}
        for hex_digest, digest_roles in (token_digests or {}).items():
            key = bytes.fromhex(hex_digest)
            self._bearer[key] = self._bearer.get(key, frozenset()) | frozenset(digest_roles)
            self._bearer_principal[key] = f"{BEARER_PRINCIPAL}:{'+'.join(sorted(self._bearer[key]))}"
        if secret:
            key = _digest(secret)
            self._bearer[key] = self._bearer.get(key, frozenset()) | held
            self._bearer_principal.setdefault(key, BEARER_PRINCIPAL)
        self._audience = audience or None
        self._emails: dict[str, frozenset[str]] = {}
        if isinstance(allowed_emails, str):
            allowed_emails = None
        for email in allowed_emails or ():
            self._emails[email] = self._emails.get(email, frozenset()) | held
        for email, email_roles in (callers or {}).items():
            self._emails[email] = self._emails.get(email, frozenset()) | frozenset(email_roles)
        self._allowed_emails: frozenset[str] | None = None
        if self._audience is not None:
            if not self._emails:
                raise ConfigError(
                    "internal API Google ID-token mode needs the allowed service account emails",
                    code="config_missing",
                    details={"variables": [Settings.env_name("internal_api_callers")]},
                )
            self._allowed_emails = frozenset(self._emails)
        if not self._bearer and self._audience is None:
            raise ConfigError(
                "internal API has no authentication configured: set NOETL_INTERNAL_API_TOKEN_DIGESTS "
                "(or NOETL_INTERNAL_API_TOKEN) or configure Google ID-token verification (audience and callers)",
                code="config_missing",
                details={
                    "variables": [
                        Settings.env_name("internal_api_token_digests"),
                        Settings.env_name("internal_api_token"),
                    ]
                },
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
        keys: JwksCache | None = None,
    ) -> InternalAuth:
        """Bearer mode from ``NOETL_INTERNAL_API_TOKEN_DIGESTS`` (one token per purpose) or, without
        digests, the shared ``NOETL_INTERNAL_API_TOKEN`` (every caller role); plus ID-token mode, the
        accounts of ``NOETL_INTERNAL_API_CALLERS``, when an audience is given."""
        digests = caller_roles.parse_role_entries(settings.internal_api_token_digests, value="sha256 hex")
        shared = settings.internal_api_token if not digests else None
        if shared is not None and settings.environment == "gcp":
            log.warning("the internal API accepts one shared token holding every caller role; set the per-role callers")
        callers = caller_roles.parse_role_entries(settings.internal_api_callers, value="email")
        return cls(
            token=shared,
            token_digests=digests,
            audience=audience,
            callers=callers if audience is not None else None,
            keys=keys,
        )

    @property
    def methods(self) -> tuple[str, ...]:
        """The enabled modes, for start-up logs."""
        enabled = []
        if self._bearer:
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
        # A dict lookup of the presented token's SHA-256: its timing tells nothing about any token's
        # bytes (finding a digest's neighbours means inverting SHA-256).
        key = _digest(presented)
        held = self._bearer.get(key)
        if held is not None:
            return Caller(self._bearer_principal[key], "bearer", held)
        if self._audience is not None and (not self._bearer or _JWT_SHAPE.fullmatch(presented)):
            assert self._keys is not None
            identity = verify_google_id_token(
                presented,
                keys=self._keys,
                audience=self._audience,
                allowed_emails=self._allowed_emails,
                now=self._now,
                leeway_s=self._leeway_s,
            )
            return Caller(identity.email, "google_id_token", self._emails.get(identity.email, frozenset()))
        raise BadCredentials("the bearer token is not valid")


def _digest(value: str) -> bytes:
    # Comparing fixed-size digests keeps the comparison constant-time in the token's length too.
    return hashlib.sha256(value.encode("utf-8")).digest()


def install(app: Flask, auth: InternalAuth, *, prefix: str = "/api/", exclude: tuple[str, ...] = ()) -> None:
    """Authenticate every request whose path is under ``prefix`` (the caller lands in ``g.caller``),
    then authorize it by the app's entry in :data:`~noetl_cloud.auth.roles.POLICY` (``create_app``'s
    role name): a route without an entry is refused to everyone. Paths under an ``exclude`` prefix are
    left to another :func:`install` (with other authentication) for that prefix.

    Errors are left to the app's JSON error handlers (``create_app`` registers them).
    """
    root = prefix.rstrip("/")
    policy = caller_roles.policy_for(str(app.config.get("NOETL_ROLE", "")))

    @app.before_request
    def _authenticate_internal_caller() -> None:
        path = request.path
        if (path != root and not path.startswith(prefix)) or path.startswith(exclude):
            return
        try:
            caller = g.caller = auth.authenticate(request.headers.get("Authorization"))
            rule = request.url_rule
            if rule is not None:  # no route: the 404 (or 405) follows
                caller_roles.authorize(policy, request.method, rule.rule, caller.roles)
        except NoetlError as exc:
            caller = g.get("caller")  # set when authenticated and refused by the policy (a role, never a secret)
            who = {"principal": caller.principal} if caller is not None else {}
            log.info("internal API call refused", extra={"error_code": exc.code, "path": path, **who})
            raise
