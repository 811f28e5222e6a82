"""Verification of Google-signed OIDC ID tokens (RS256 JWTs).

Callers of the internal API are Cloud Run service accounts that present an ID token minted by
the metadata server; Pub/Sub push subscriptions present the same kind of token. Verification
is pure except for the key set: :class:`JwksCache` fetches Google's JWKS through an injected
function, caches the keys by ``kid`` and refreshes at most once per interval, so a flood of
tokens with made-up key ids cannot turn into a flood of requests to Google.

The order of the checks is the order of trust: the header is parsed (algorithm pinned to
RS256), the signature is verified with the key named by ``kid``, and only then are claims read.
Failures are typed and carry a stable ``code``:

==========================  ======  ================================================
code                        status  meaning
==========================  ======  ================================================
``oidc_malformed``          401     not a JWS we can parse, or a claim of the wrong type
``oidc_bad_algorithm``      401     header ``alg`` is not RS256 (``none``, HS256, ...)
``oidc_unknown_kid``        401     no Google key with that ``kid``, even after a refresh
``oidc_bad_signature``      401     the signature does not verify
``oidc_expired``            401     ``exp`` passed, or ``iat``/``nbf`` in the future
``oidc_wrong_issuer``       401     ``iss`` is not Google
``oidc_wrong_audience``     401     the token was minted for another service
``oidc_unverified_email``   401     no ``email``, or ``email_verified`` is not true
``oidc_wrong_sa``           403     a valid token of a principal that is not allowed
``oidc_jwks_unavailable``   503     Google's key set could not be fetched (retryable)
==========================  ======  ================================================

A wrong audience is 401, not 403: the token is not a credential for this service at all (the
caller's fix is to mint a token with the right audience), which is also how Cloud Run itself
answers. 403 is kept for the one case where the credential is fully valid and proves who the
caller is, but that principal may not call: ``oidc_wrong_sa``.

Tokens are never logged and never echoed back in an error.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from jwt.algorithms import RSAAlgorithm

from noetl_cloud.errors import ConfigError, Forbidden, Unauthorized, Unavailable

log = logging.getLogger(__name__)

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v3/certs"
GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})
ALGORITHM = "RS256"

# A Google ID token is about 1 KB; anything far larger is not one and is refused before parsing.
MAX_TOKEN_CHARS = 16 * 1024
MIN_RSA_KEY_BITS = 2048


# -- errors --------------------------------------------------------------------------------------


class OidcMalformed(Unauthorized):
    code = "oidc_malformed"


class OidcBadAlgorithm(Unauthorized):
    code = "oidc_bad_algorithm"


class OidcUnknownKid(Unauthorized):
    code = "oidc_unknown_kid"


class OidcBadSignature(Unauthorized):
    code = "oidc_bad_signature"


class OidcExpired(Unauthorized):
    code = "oidc_expired"


class OidcWrongIssuer(Unauthorized):
    code = "oidc_wrong_issuer"


class OidcWrongAudience(Unauthorized):
    code = "oidc_wrong_audience"


class OidcUnverifiedEmail(Unauthorized):
    code = "oidc_unverified_email"


class OidcWrongServiceAccount(Forbidden):
    code = "oidc_wrong_sa"


class JwksUnavailable(Unavailable):
    code = "oidc_jwks_unavailable"


# -- the key set ---------------------------------------------------------------------------------


def fetch_url(url: str, *, timeout_s: float = 5.0) -> bytes:
    """GET ``url`` and return the body; raises :class:`OSError` on any transport or HTTP failure."""
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"JWKS URL must be http(s): {url!r}")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - scheme checked
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - scheme checked
        body: bytes = response.read()
        return body


def parse_jwks(document: bytes) -> dict[str, RSAPublicKey]:
    """The RSA signing keys of a JWKS document by ``kid``; keys of other types are skipped.

    Raises :class:`ValueError` when the document is not a JWKS with at least one usable key.
    """
    data = json.loads(document)
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError("JWKS document has no 'keys' list")
    keys: dict[str, RSAPublicKey] = {}
    for jwk in data["keys"]:
        if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or not isinstance(jwk.get("kid"), str):
            continue
        if jwk.get("use", "sig") != "sig" or jwk.get("alg", ALGORITHM) != ALGORITHM:
            continue
        try:
            key = RSAAlgorithm.from_jwk(jwk)
        except (jwt.InvalidKeyError, ValueError, TypeError):
            log.warning("skipping an invalid key in the JWKS", extra={"kid": jwk["kid"]})
            continue
        if isinstance(key, RSAPrivateKey):
            key = key.public_key()
        if key.key_size < MIN_RSA_KEY_BITS:
            log.warning("skipping a short RSA key in the JWKS", extra={"kid": jwk["kid"]})
            continue
        keys[jwk["kid"]] = key
    if not keys:
        raise ValueError("JWKS document has no usable RS256 key")
    return keys


class JwksCache:
    """Google's signing keys by ``kid``, fetched on first use and cached for ``ttl_s``.

    An unknown ``kid`` triggers one refresh, but fetches are rate-limited to one per
    ``min_refresh_interval_s`` (successful or not), so bogus key ids cannot hammer the key
    endpoint. When a refresh fails and keys are already cached, the cached keys keep being
    served (Google publishes a new key well before it signs with it); with nothing cached the
    failure is :class:`JwksUnavailable` (503, retryable). Safe to share between threads.
    """

    def __init__(
        self,
        url: str = GOOGLE_CERTS_URL,
        *,
        fetch: Callable[[str], bytes] | None = None,
        ttl_s: float = 3600.0,
        min_refresh_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self._fetch: Callable[[str], bytes] = fetch or (lambda u: fetch_url(u, timeout_s=timeout_s))
        self._ttl_s = ttl_s
        self._min_refresh_interval_s = min_refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, RSAPublicKey] = {}
        self._expires_at = float("-inf")
        self._last_attempt: float | None = None

    def get(self, kid: str) -> RSAPublicKey:
        """The key with ``kid``; refreshes when the cache is stale or the kid unknown (rate-limited).

        Raises :class:`OidcUnknownKid` when the kid stays unknown and :class:`JwksUnavailable`
        when the key set could not be fetched and no cached key can answer.
        """
        keys, expires_at = self._keys, self._expires_at
        if kid in keys and self._clock() < expires_at:
            return keys[kid]
        with self._lock:
            now = self._clock()
            if (now >= self._expires_at or kid not in self._keys) and self._may_refresh(now):
                self._refresh(now, kid)
            key = self._keys.get(kid)
        if key is None:
            raise OidcUnknownKid("token is signed with an unknown key")
        return key

    def _may_refresh(self, now: float) -> bool:
        return self._last_attempt is None or now - self._last_attempt >= self._min_refresh_interval_s

    def _refresh(self, now: float, kid: str) -> None:
        self._last_attempt = now
        try:
            keys = parse_jwks(self._fetch(self.url))
        except (OSError, ValueError) as exc:
            log.warning("could not refresh the JWKS", extra={"jwks_url": self.url, "error": type(exc).__name__})
            if kid not in self._keys:
                raise JwksUnavailable("the token signing keys could not be fetched") from None
            return
        self._keys = keys
        self._expires_at = now + self._ttl_s


# -- verification --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoogleIdentity:
    """Who a verified Google ID token says the caller is."""

    email: str
    subject: str
    audience: str
    issuer: str
    claims: Mapping[str, Any] = field(repr=False)


def verify_google_id_token(
    token: str,
    *,
    keys: JwksCache,
    audience: str | Sequence[str],
    allowed_emails: Collection[str] | None,
    now: Callable[[], float] = time.time,
    leeway_s: int = 30,
) -> GoogleIdentity:
    """Verify a Google-signed ID token and return the identity it proves.

    ``audience`` is the one value (or the values) the token's ``aud`` must equal exactly;
    ``allowed_emails`` the service accounts that may call (``None`` allows any verified email:
    any Google account can mint a token for any audience, so only pass ``None`` when something
    else authorizes the caller). ``leeway_s`` absorbs clock skew on ``exp``, ``iat`` and ``nbf``.
    Raises the typed errors listed in the module docstring.
    """
    audiences = _audiences(audience)
    if isinstance(allowed_emails, str):
        raise TypeError("allowed_emails must be a collection of emails, not one string")

    header = _header(token)
    key = keys.get(header["kid"])
    claims = _verified_claims(token, key)

    at = now()
    exp = _number(claims, "exp")
    iat = _number(claims, "iat")
    if at > exp + leeway_s:
        raise OidcExpired("token has expired")
    if iat > at + leeway_s:
        raise OidcExpired("token is issued in the future")
    if "nbf" in claims and _number(claims, "nbf") > at + leeway_s:
        raise OidcExpired("token is not valid yet")

    issuer = claims.get("iss")
    if not isinstance(issuer, str) or issuer not in GOOGLE_ISSUERS:
        raise OidcWrongIssuer("token is not issued by Google")

    matched = _matched_audience(claims.get("aud"), audiences)
    if matched is None:
        raise OidcWrongAudience("token is not issued for this service")

    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise OidcMalformed("token has no subject")

    email = claims.get("email")
    verified = claims.get("email_verified")
    if not isinstance(email, str) or not email or not (verified is True or verified == "true"):
        raise OidcUnverifiedEmail("token does not carry a verified email")

    if allowed_emails is not None and email not in allowed_emails:
        raise OidcWrongServiceAccount("this service account may not call this API", details={"email": email})

    return GoogleIdentity(email, subject, matched, issuer, MappingProxyType(claims))


def _audiences(audience: str | Sequence[str]) -> tuple[str, ...]:
    audiences = (audience,) if isinstance(audience, str) else tuple(audience)
    if not audiences or not all(isinstance(a, str) and a for a in audiences):
        raise ConfigError("the expected ID-token audience is empty", code="config_invalid")
    return audiences


def _header(token: str) -> dict[str, Any]:
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise OidcMalformed("token is not a JWT")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise OidcMalformed("token is not a JWT") from None
    if header.get("alg") != ALGORITHM:
        raise OidcBadAlgorithm("token must be signed with RS256")
    if "crit" in header or "b64" in header:
        raise OidcMalformed("token uses unsupported JWS extensions")
    if not isinstance(header.get("kid"), str) or not header["kid"]:
        raise OidcMalformed("token has no key id")
    return header


def _verified_claims(token: str, key: RSAPublicKey) -> dict[str, Any]:
    jws = jwt.PyJWS(algorithms=[ALGORITHM], options={"enforce_minimum_key_length": True})
    try:
        decoded = jws.decode_complete(token, key, algorithms=[ALGORITHM])
    except jwt.InvalidSignatureError:
        raise OidcBadSignature("token signature does not verify") from None
    except jwt.InvalidAlgorithmError:
        raise OidcBadAlgorithm("token must be signed with RS256") from None
    except jwt.InvalidTokenError:
        raise OidcMalformed("token is not a JWT") from None
    # Signed by Google from here on: the payload may be trusted as far as its claims say.
    try:
        claims = json.loads(decoded["payload"])
    except ValueError:
        raise OidcMalformed("token payload is not JSON") from None
    if not isinstance(claims, dict):
        raise OidcMalformed("token payload is not a JSON object")
    return claims


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OidcMalformed(f"token claim {name!r} is missing or not a number")
    return float(value)


def _matched_audience(aud: Any, audiences: tuple[str, ...]) -> str | None:
    values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    for value in values:
        if isinstance(value, str) and value in audiences:
            return value
    return None
