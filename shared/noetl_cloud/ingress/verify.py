"""Verification of push deliveries, the first thing the public ingress does with a request (RFC §6, §7.5).

Each verifier is a pure function of the raw body bytes, the request headers, the listener's
``verify`` config, the secret resolved from the Wallet and a clock. It returns the
:class:`VerifiedIdentity` the delivery proves or raises a :class:`Rejection`; nothing of the
request (JSON, header directives) is read before it passes. The only I/O is the JWKS fetch
inside the injected :class:`~noetl_cloud.auth.google_oidc.JwksCache` (``pubsub_oidc``).

=====================  ==========================================================================
``verify.type``        the check
=====================  ==========================================================================
``hmac_sha256``        HMAC-SHA256 of the raw body, hex or base64, in ``header`` (``x-signature``)
                       after an optional ``prefix``
``github``             ``X-Hub-Signature-256: sha256=<hex>``; message id ``X-GitHub-Delivery``
``stripe``             ``Stripe-Signature: t=<unix>,v1=<hex>...`` over ``"{t}.{body}"``, ±tolerance
``standard_webhooks``  ``webhook-id/-timestamp/-signature`` (or ``svix-*``) over
                       ``"{id}.{timestamp}.{body}"``, ±tolerance, any ``v1`` entry may match
``bearer``             ``Bearer <token>`` (or the raw token in a custom header) equal to the secret
``pubsub_oidc``        a Google-signed ID token for ``audience`` of ``service_account``
``none``, unknown      never passes: push ingress always verifies
=====================  ==========================================================================

Rejections carry a stable ``code`` and a status: 401 when credentials are missing or invalid, 403
when no credential could ever pass (``unsupported_scheme``) or a valid one proves a principal that
may not call (``oidc_wrong_sa``). The Google OIDC failures keep the codes and statuses of
:mod:`noetl_cloud.auth.google_oidc`; ``oidc_jwks_unavailable`` is not a rejection but our own
outage (503, retryable) and propagates as is. A missing or unusable secret or OIDC setting is a
:class:`~noetl_cloud.errors.ConfigError`: the listener is misconfigured, the caller is not at fault.

Signatures are checked before timestamps, so ``timestamp_out_of_tolerance`` only ever describes a
genuine delivery that is stale (a replay, or a skewed clock). Messages name headers, never their
values: no secret, signature or token reaches an error or a log. ``X-GitHub-Delivery`` is not
covered by GitHub's signature, so a replayed body may come with any delivery id; the
Standard Webhooks id and both schemes' timestamps are signed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from noetl_cloud.auth.google_oidc import (
    JwksCache,
    OidcBadAlgorithm,
    OidcBadSignature,
    OidcExpired,
    OidcMalformed,
    OidcUnknownKid,
    OidcUnverifiedEmail,
    OidcWrongAudience,
    OidcWrongIssuer,
    OidcWrongServiceAccount,
    verify_google_id_token,
)
from noetl_cloud.errors import ConfigError, NoetlError
from noetl_cloud.ingress import signatures as sig

SHARED_SECRET_PRINCIPAL = "shared-secret"  # noqa: S105 - a principal label, not a secret
DEFAULT_TOLERANCE_S = 300
#: Schemes whose secret is a Wallet entry (``pubsub_oidc`` needs none).
SECRET_SCHEMES = frozenset({"hmac_sha256", "github", "stripe", "standard_webhooks", "bearer"})
SCHEMES = SECRET_SCHEMES | {"pubsub_oidc"}

#: Lowercase names of the headers that carry credentials in any scheme; never forwarded downstream.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-hub-signature",
        "x-hub-signature-256",
        "stripe-signature",
        "webhook-signature",
        "svix-signature",
        "x-signature",
    }
)

_OIDC_ERRORS = (
    OidcMalformed,
    OidcBadAlgorithm,
    OidcUnknownKid,
    OidcBadSignature,
    OidcExpired,
    OidcWrongIssuer,
    OidcWrongAudience,
    OidcUnverifiedEmail,
    OidcWrongServiceAccount,
)


# -- results and rejections ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifiedIdentity:
    """What a verified delivery proves about its sender."""

    scheme: str
    principal: str
    message_id: str | None = None
    timestamp: int | None = None


class Rejection(NoetlError):
    """A delivery that failed verification: 401 for missing or invalid credentials, 403 otherwise."""

    status = 401
    code = "rejected"


class MissingSignature(Rejection):
    code = "missing_signature"


class MalformedSignature(Rejection):
    code = "malformed_signature"


class BadSignature(Rejection):
    code = "bad_signature"


class TimestampOutOfTolerance(Rejection):
    code = "timestamp_out_of_tolerance"


class MissingToken(Rejection):
    code = "missing_token"


class BadToken(Rejection):
    code = "bad_token"


class UnsupportedScheme(Rejection):
    """The listener's scheme cannot verify anything (``none``, or unknown): no credential can pass."""

    status = 403
    code = "unsupported_scheme"


class OidcRejection(Rejection):
    """A Google OIDC failure (:mod:`noetl_cloud.auth.google_oidc`) with its own code and status."""

    def __init__(self, cause: NoetlError) -> None:
        super().__init__(cause.message, code=cause.code, details=cause.details)
        self.status = cause.status


# -- config ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """A listener's ``verify`` settings, as the control plane returns them (the secret is resolved apart)."""

    type: str
    header: str | None = None
    encoding: str = "hex"
    prefix: str | None = None
    tolerance_s: int = DEFAULT_TOLERANCE_S
    audience: str | None = None
    service_account: str | None = None
    jwks_url: str | None = None
    query_param: str | None = None

    def __post_init__(self) -> None:
        if self.encoding not in ("hex", "base64"):
            raise ConfigError("verify.encoding must be hex or base64", code="config_invalid")
        if isinstance(self.tolerance_s, bool) or not isinstance(self.tolerance_s, int) or self.tolerance_s < 0:
            raise ConfigError("verify.tolerance_s must be a non-negative integer", code="config_invalid")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> VerifyConfig:
        """Build from the ``verify`` mapping; unknown keys (``secret``, ``secret_alias``) are ignored
        and ``null`` means the default. Raises :class:`ConfigError` naming a field of the wrong type."""
        kind = data.get("type")
        if not isinstance(kind, str):
            raise ConfigError("verify.type must be a string", code="config_invalid")
        tolerance = data.get("tolerance_s")
        header = _optional_str(data, "header")
        return cls(
            type=kind,
            header=header.lower() if header else None,
            encoding=_optional_str(data, "encoding") or "hex",
            prefix=_optional_str(data, "prefix"),
            tolerance_s=DEFAULT_TOLERANCE_S if tolerance is None else tolerance,
            audience=_optional_str(data, "audience"),
            service_account=_optional_str(data, "service_account"),
            jwks_url=_optional_str(data, "jwks_url"),
            query_param=_optional_str(data, "query_param"),
        )


def _optional_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"verify.{name} must be a string", code="config_invalid")
    return value


def credential_headers(config: VerifyConfig) -> frozenset[str]:
    """:data:`CREDENTIAL_HEADERS` plus the header ``config`` reads its credential from, lowercase."""
    return CREDENTIAL_HEADERS | {config.header.lower()} if config.header else CREDENTIAL_HEADERS


# -- dispatch -------------------------------------------------------------------------------------


def verify(
    body: bytes,
    headers: Mapping[str, str],
    config: VerifyConfig,
    secret: str | None,
    *,
    now: Callable[[], float] = time.time,
    jwks: JwksCache | None = None,
    query: Mapping[str, str] | None = None,
) -> VerifiedIdentity:
    """Verify one push delivery per ``config.type`` and return what it proves.

    ``query`` is the request's URL query, read only by a ``bearer`` verifier configured with
    ``query_param``.

    ``body`` is the exact raw request body; ``headers`` are looked up case-insensitively. Raises a
    :class:`Rejection` for a delivery that does not verify, :class:`ConfigError` when the secret
    (or, for ``pubsub_oidc``, the audience, service account or ``jwks``) is missing or unusable.
    """
    if config.type not in SCHEMES:
        raise UnsupportedScheme("this listener's verify type cannot accept deliveries")
    view = sig.HeaderView(headers)
    if config.type == "pubsub_oidc":
        return _pubsub_oidc(view, config, now, jwks)
    if not secret:
        raise ConfigError(f"the {config.type} verifier has no secret", code="config_invalid")
    if config.type == "hmac_sha256":
        return _hmac_sha256(body, view, config, secret)
    if config.type == "github":
        return _github(body, view, secret)
    if config.type == "stripe":
        return _stripe(body, view, config, secret, now)
    if config.type == "standard_webhooks":
        return _standard_webhooks(body, view, config, secret, now)
    if config.query_param:
        return _bearer_query(query or {}, config.query_param, secret)
    return _bearer(view, config, secret)


def _bearer_query(query: Mapping[str, str], name: str, secret: str) -> VerifiedIdentity:
    token = query.get(name)
    if not token:
        raise MissingToken(f"the {name!r} query parameter is required")
    if not sig.same_secret(token.encode("utf-8"), secret.encode("utf-8")):
        raise BadToken("bearer token is not valid for this listener")
    return VerifiedIdentity("bearer", SHARED_SECRET_PRINCIPAL)


def _header(headers: sig.HeaderView, name: str, missing: type[Rejection], malformed: type[Rejection]) -> str:
    """The trimmed, non-empty value of ``name``; ``missing`` when absent or empty, ``malformed`` when ambiguous."""
    if name in headers.ambiguous:
        raise malformed(f"header {name} is given more than once")
    value = headers.get(name)
    if not value:
        raise missing(f"header {name} is missing")
    return value


def _within_tolerance(timestamp: int, config: VerifyConfig, now: Callable[[], float]) -> None:
    if abs(now() - timestamp) > config.tolerance_s:
        raise TimestampOutOfTolerance(f"signed timestamp is more than {config.tolerance_s}s from now")


# -- HMAC schemes ---------------------------------------------------------------------------------


def _hmac_sha256(body: bytes, headers: sig.HeaderView, config: VerifyConfig, secret: str) -> VerifiedIdentity:
    name = (config.header or "x-signature").lower()
    value = _header(headers, name, MissingSignature, MalformedSignature)
    if config.prefix:
        if not value.startswith(config.prefix):
            raise MalformedSignature(f"header {name} lacks the configured prefix")
        value = value[len(config.prefix) :]
    decode = sig.decode_base64_digest if config.encoding == "base64" else sig.decode_hex_digest
    presented = decode(value)
    if presented is None:
        raise MalformedSignature(f"header {name} is not a {config.encoding} SHA-256 digest")
    if not sig.any_match(sig.hmac_sha256(secret.encode("utf-8"), body), [presented]):
        raise BadSignature("signature does not match the body")
    return VerifiedIdentity("hmac_sha256", SHARED_SECRET_PRINCIPAL)


def _github(body: bytes, headers: sig.HeaderView, secret: str) -> VerifiedIdentity:
    name = "x-hub-signature-256"
    value = _header(headers, name, MissingSignature, MalformedSignature)
    presented = sig.decode_hex_digest(value.removeprefix("sha256=")) if value.startswith("sha256=") else None
    if presented is None:
        raise MalformedSignature(f"header {name} is not sha256=<hex digest>")
    if not sig.any_match(sig.hmac_sha256(secret.encode("utf-8"), body), [presented]):
        raise BadSignature("signature does not match the body")
    delivery = headers.get("x-github-delivery") if "x-github-delivery" not in headers.ambiguous else None
    return VerifiedIdentity("github", SHARED_SECRET_PRINCIPAL, message_id=delivery or None)


def _stripe(
    body: bytes, headers: sig.HeaderView, config: VerifyConfig, secret: str, now: Callable[[], float]
) -> VerifiedIdentity:
    name = "stripe-signature"
    parsed = sig.parse_stripe_header(_header(headers, name, MissingSignature, MalformedSignature))
    timestamp = sig.unix_seconds(parsed.timestamp) if parsed.timestamp is not None else None
    if timestamp is None:
        raise MalformedSignature(f"header {name} has no single t=<unix seconds>")
    presented = [digest for digest in map(sig.decode_hex_digest, parsed.v1) if digest is not None]
    if not presented:
        raise MalformedSignature(f"header {name} has no v1=<hex digest>")
    expected = sig.hmac_sha256(secret.encode("utf-8"), f"{timestamp}.".encode("ascii"), body)
    if not sig.any_match(expected, presented):
        raise BadSignature("no v1 signature matches the body")
    _within_tolerance(timestamp, config, now)
    return VerifiedIdentity("stripe", SHARED_SECRET_PRINCIPAL, timestamp=timestamp)


def _standard_webhooks(
    body: bytes, headers: sig.HeaderView, config: VerifyConfig, secret: str, now: Callable[[], float]
) -> VerifiedIdentity:
    family = "svix" if "webhook-signature" not in headers and "svix-signature" in headers else "webhook"
    signature_value = _header(headers, f"{family}-signature", MissingSignature, MalformedSignature)
    message_id = _header(headers, f"{family}-id", MissingSignature, MalformedSignature)
    written = _header(headers, f"{family}-timestamp", MissingSignature, MalformedSignature)
    timestamp = sig.unix_seconds(written)
    signed_id = sig.utf8(message_id)
    if timestamp is None or signed_id is None:
        raise MalformedSignature(f"headers {family}-id / {family}-timestamp are malformed")
    presented = [d for d in map(sig.decode_base64_digest, sig.parse_standard_signatures(signature_value)) if d]
    if not presented:
        raise MalformedSignature(f"header {family}-signature has no v1,<base64 digest> entry")
    key = sig.standard_webhooks_key(secret)
    if key is None:
        raise ConfigError("the standard_webhooks secret is not base64 (after whsec_)", code="config_invalid")
    expected = sig.hmac_sha256(key, signed_id, f".{written}.".encode("ascii"), body)
    if not sig.any_match(expected, presented):
        raise BadSignature("no v1 signature matches the body")
    _within_tolerance(timestamp, config, now)
    return VerifiedIdentity("standard_webhooks", SHARED_SECRET_PRINCIPAL, message_id=message_id, timestamp=timestamp)


# -- token schemes --------------------------------------------------------------------------------


def _bearer(headers: sig.HeaderView, config: VerifyConfig, secret: str) -> VerifiedIdentity:
    name = (config.header or "authorization").lower()
    value = _header(headers, name, MissingToken, BadToken)
    token = sig.bearer_token(value)
    if token is None and name != "authorization" and value[:7].lower() != "bearer ":
        token = value  # a custom header may carry the raw token
    presented = sig.utf8(token) if token is not None else None
    if presented is None or not sig.same_secret(presented, secret.encode("utf-8")):
        raise BadToken("bearer token is not valid for this listener")
    return VerifiedIdentity("bearer", SHARED_SECRET_PRINCIPAL)


def _pubsub_oidc(
    headers: sig.HeaderView, config: VerifyConfig, now: Callable[[], float], jwks: JwksCache | None
) -> VerifiedIdentity:
    if jwks is None:
        raise ConfigError("pubsub_oidc needs a JWKS cache", code="config_invalid")
    if not config.audience or not config.service_account:
        raise ConfigError("pubsub_oidc needs verify.audience and verify.service_account", code="config_invalid")
    if config.jwks_url and config.jwks_url != jwks.url:
        raise ConfigError("the JWKS cache given does not serve verify.jwks_url", code="config_invalid")
    token = sig.bearer_token(_header(headers, "authorization", MissingToken, BadToken))
    if token is None:
        raise BadToken("authorization is not a Bearer token")
    try:
        identity = verify_google_id_token(
            token, keys=jwks, audience=config.audience, allowed_emails=[config.service_account], now=now
        )
    except _OIDC_ERRORS as exc:
        raise OidcRejection(exc) from exc
    return VerifiedIdentity("pubsub_oidc", identity.email)
