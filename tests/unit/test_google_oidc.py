from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Callable
from functools import cache
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm

from noetl_cloud.auth.google_oidc import (
    GOOGLE_CERTS_URL,
    GoogleIdentity,
    JwksCache,
    parse_jwks,
    verify_google_id_token,
)
from noetl_cloud.errors import Forbidden, NoetlError, Unauthorized, Unavailable

NOW = 1_700_000_000.0
AUDIENCE = "https://control-plane-abc123-ew.a.run.app"
SA = "worker@noetl-prod.iam.gserviceaccount.com"


@cache
def rsa_key(name: str, bits: int = 2048) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def public_jwk(kid: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, alg="RS256", use="sig")
    return jwk


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeGoogle:
    """Google's side: signing keys by kid, the JWKS served through the injected fetch, minting."""

    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {"k1": rsa_key("k1")}
        self.fetches: list[str] = []
        self.fail: Exception | None = None

    def fetch(self, url: str) -> bytes:
        self.fetches.append(url)
        if self.fail is not None:
            raise self.fail
        return json.dumps({"keys": [public_jwk(kid, key) for kid, key in self.keys.items()]}).encode()

    def claims(self, **overrides: Any) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "iss": "https://accounts.google.com",
            "aud": AUDIENCE,
            "azp": "1234567890",
            "sub": "1234567890",
            "email": SA,
            "email_verified": True,
            "iat": int(NOW) - 10,
            "exp": int(NOW) + 3590,
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not DROP}

    def mint(
        self,
        *,
        kid: str = "k1",
        key: rsa.RSAPrivateKey | None = None,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        signer = key if key is not None else self.keys[kid]
        return jwt.encode(self.claims(**claims), signer, algorithm="RS256", headers={"kid": kid, **(headers or {})})


DROP = object()


@pytest.fixture
def google() -> FakeGoogle:
    return FakeGoogle()


@pytest.fixture
def clock() -> Clock:
    return Clock(1000.0)


@pytest.fixture
def keys(google: FakeGoogle, clock: Clock) -> JwksCache:
    return JwksCache("https://keys.test/certs", fetch=google.fetch, clock=clock)


def verify(token: str, keys: JwksCache, **kwargs: Any) -> GoogleIdentity:
    options: dict[str, Any] = {"audience": AUDIENCE, "allowed_emails": {SA}, "now": lambda: NOW}
    options.update(kwargs)
    return verify_google_id_token(token, keys=keys, **options)


def rejection(call: Callable[[], object]) -> NoetlError:
    with pytest.raises(NoetlError) as info:
        call()
    return info.value


# -- accepted tokens -----------------------------------------------------------------------------


def test_valid_token_gives_the_identity_it_proves(google: FakeGoogle, keys: JwksCache) -> None:
    identity = verify(google.mint(), keys)
    assert identity.email == SA
    assert identity.subject == "1234567890"
    assert identity.audience == AUDIENCE
    assert identity.issuer == "https://accounts.google.com"
    assert identity.claims["azp"] == "1234567890"
    assert google.fetches == ["https://keys.test/certs"]


def test_both_google_issuer_spellings_are_accepted(google: FakeGoogle, keys: JwksCache) -> None:
    assert verify(google.mint(iss="accounts.google.com"), keys).issuer == "accounts.google.com"


def test_one_of_several_audiences_is_accepted_and_reported(google: FakeGoogle, keys: JwksCache) -> None:
    identity = verify(google.mint(aud="https://other"), keys, audience=["https://first", "https://other"])
    assert identity.audience == "https://other"


def test_any_verified_email_passes_when_no_allow_list_is_given(google: FakeGoogle, keys: JwksCache) -> None:
    assert verify(google.mint(email="someone@example.com"), keys, allowed_emails=None).email == "someone@example.com"


def test_expiry_within_the_leeway_is_accepted(google: FakeGoogle, keys: JwksCache) -> None:
    verify(google.mint(exp=int(NOW) - 29, iat=int(NOW) - 3600), keys)
    verify(google.mint(iat=int(NOW) + 29), keys)


def test_default_cache_url_is_googles_and_nothing_is_fetched_at_construction() -> None:
    calls: list[str] = []

    def fetch(url: str) -> bytes:
        calls.append(url)
        return b""

    cache_ = JwksCache(fetch=fetch)
    assert cache_.url == GOOGLE_CERTS_URL == "https://www.googleapis.com/oauth2/v3/certs"
    assert calls == []


# -- algorithm confusion -------------------------------------------------------------------------


def test_alg_none_is_refused_before_any_key_is_fetched(google: FakeGoogle, keys: JwksCache) -> None:
    token = jwt.encode(google.claims(), "", algorithm="none", headers={"kid": "k1"})
    err = rejection(lambda: verify(token, keys))
    assert isinstance(err, Unauthorized)
    assert err.code == "oidc_bad_algorithm"
    assert google.fetches == []


def test_hs256_signed_with_the_public_key_as_hmac_secret_is_refused(google: FakeGoogle, keys: JwksCache) -> None:
    public_pem = (
        google.keys["k1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signing_input = (
        b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
        + "."
        + b64url(json.dumps(google.claims()).encode())
    )
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    token = signing_input + "." + b64url(signature)
    err = rejection(lambda: verify(token, keys))
    assert (err.status, err.code) == (401, "oidc_bad_algorithm")


def test_rs256_header_over_an_hmac_signature_fails_the_signature(google: FakeGoogle, keys: JwksCache) -> None:
    header = b64url(json.dumps({"alg": "RS256", "kid": "k1"}).encode())
    payload = b64url(json.dumps(google.claims()).encode())
    signature = hmac.new(b"secret", f"{header}.{payload}".encode(), hashlib.sha256).digest()
    err = rejection(lambda: verify(f"{header}.{payload}.{b64url(signature)}", keys))
    assert err.code == "oidc_bad_signature"


# -- keys ----------------------------------------------------------------------------------------


def test_unknown_kid_refreshes_once_then_is_refused(google: FakeGoogle, keys: JwksCache, clock: Clock) -> None:
    verify(google.mint(), keys)
    clock.advance(31)
    google.keys["bogus"] = rsa_key("bogus")
    token = google.mint(kid="bogus")
    del google.keys["bogus"]
    err = rejection(lambda: verify(token, keys))
    assert (err.status, err.code) == (401, "oidc_unknown_kid")
    assert len(google.fetches) == 2


def test_refreshes_for_unknown_kids_are_rate_limited(google: FakeGoogle, keys: JwksCache, clock: Clock) -> None:
    verify(google.mint(), keys)
    token = google.mint(kid="k1", headers={"kid": "nope"})
    for _ in range(50):
        assert rejection(lambda: verify(token, keys)).code == "oidc_unknown_kid"
    assert len(google.fetches) == 1  # the first fetch was under 30 s ago
    clock.advance(30)
    for _ in range(50):
        assert rejection(lambda: verify(token, keys)).code == "oidc_unknown_kid"
    assert len(google.fetches) == 2


def test_a_rotated_in_key_is_found_by_the_refresh(google: FakeGoogle, keys: JwksCache, clock: Clock) -> None:
    verify(google.mint(), keys)
    google.keys["k2"] = rsa_key("k2")
    clock.advance(60)
    assert verify(google.mint(kid="k2"), keys).email == SA
    assert len(google.fetches) == 2


def test_keys_are_cached_for_the_ttl_then_refetched(google: FakeGoogle, keys: JwksCache, clock: Clock) -> None:
    token = google.mint()
    verify(token, keys)
    clock.advance(3599)
    verify(token, keys)
    assert len(google.fetches) == 1
    clock.advance(1)
    verify(token, keys)
    assert len(google.fetches) == 2


def test_stale_keys_are_served_when_the_refresh_fails(google: FakeGoogle, keys: JwksCache, clock: Clock) -> None:
    token = google.mint()
    verify(token, keys)
    clock.advance(4000)
    google.fail = OSError("connection reset")
    assert verify(token, keys).email == SA
    assert len(google.fetches) == 2


def test_no_keys_at_all_is_a_retryable_503(google: FakeGoogle, keys: JwksCache) -> None:
    google.fail = TimeoutError("timed out")
    err = rejection(lambda: verify(google.mint(), keys))
    assert isinstance(err, Unavailable)
    assert (err.status, err.code, err.retryable) == (503, "oidc_jwks_unavailable", True)


def test_a_jwks_that_is_not_json_counts_as_a_failed_fetch(google: FakeGoogle) -> None:
    bad = JwksCache(fetch=lambda _url: b"<html>oops</html>")
    assert rejection(lambda: verify(google.mint(), bad)).code == "oidc_jwks_unavailable"


def test_parse_jwks_keeps_only_rs256_signing_keys_of_sufficient_size() -> None:
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()))
    ec_jwk["kid"] = "ec"
    document = {
        "keys": [
            public_jwk("good", rsa_key("k1")),
            ec_jwk,
            {**public_jwk("enc", rsa_key("k1")), "use": "enc"},
            public_jwk("short", rsa_key("short", 1024)),
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            {"kty": "RSA", "kid": "typed", "n": 5, "e": "AQAB"},
        ]
    }
    assert list(parse_jwks(json.dumps(document).encode())) == ["good"]
    with pytest.raises(ValueError):
        parse_jwks(b'{"keys": []}')


# -- signature -----------------------------------------------------------------------------------


def test_tampered_payload_fails_the_signature(google: FakeGoogle, keys: JwksCache) -> None:
    header, _payload, signature = google.mint(email="intruder@example.com").split(".")
    forged = b64url(json.dumps(google.claims()).encode())
    err = rejection(lambda: verify(f"{header}.{forged}.{signature}", keys))
    assert (err.status, err.code) == (401, "oidc_bad_signature")


def test_token_signed_by_another_key_under_a_known_kid_fails(google: FakeGoogle, keys: JwksCache) -> None:
    err = rejection(lambda: verify(google.mint(key=rsa_key("attacker")), keys))
    assert err.code == "oidc_bad_signature"


def test_signature_is_checked_before_any_claim(google: FakeGoogle, keys: JwksCache) -> None:
    token = google.mint(key=rsa_key("attacker"), exp=1, aud="elsewhere", iss="evil", email="x@y")
    assert rejection(lambda: verify(token, keys)).code == "oidc_bad_signature"


# -- claims --------------------------------------------------------------------------------------


def test_expired_token_is_refused(google: FakeGoogle, keys: JwksCache) -> None:
    err = rejection(lambda: verify(google.mint(exp=int(NOW) - 31, iat=int(NOW) - 3600), keys))
    assert (err.status, err.code) == (401, "oidc_expired")


def test_token_issued_in_the_future_is_refused(google: FakeGoogle, keys: JwksCache) -> None:
    err = rejection(lambda: verify(google.mint(iat=int(NOW) + 120, exp=int(NOW) + 3720), keys))
    assert err.code == "oidc_expired"


def test_token_not_valid_yet_is_refused(google: FakeGoogle, keys: JwksCache) -> None:
    assert rejection(lambda: verify(google.mint(nbf=int(NOW) + 300), keys)).code == "oidc_expired"


def test_wrong_issuer_is_401(google: FakeGoogle, keys: JwksCache) -> None:
    err = rejection(lambda: verify(google.mint(iss="https://evil.example.com"), keys))
    assert (err.status, err.code) == (401, "oidc_wrong_issuer")


@pytest.mark.parametrize("aud", ["https://elsewhere.a.run.app", AUDIENCE + "/", AUDIENCE.upper(), ["https://x"], 7])
def test_audience_must_match_exactly(google: FakeGoogle, keys: JwksCache, aud: Any) -> None:
    err = rejection(lambda: verify(google.mint(aud=aud), keys))
    assert (err.status, err.code) == (401, "oidc_wrong_audience")


@pytest.mark.parametrize(
    "claims", [{"email_verified": False}, {"email_verified": DROP}, {"email": DROP}, {"email_verified": "false"}]
)
def test_unverified_or_missing_email_is_refused(google: FakeGoogle, keys: JwksCache, claims: dict[str, Any]) -> None:
    err = rejection(lambda: verify(google.mint(**claims), keys))
    assert (err.status, err.code) == (401, "oidc_unverified_email")


@pytest.mark.parametrize("email", ["other@noetl-prod.iam.gserviceaccount.com", SA.upper(), SA + "."])
def test_valid_token_of_another_service_account_is_403(google: FakeGoogle, keys: JwksCache, email: str) -> None:
    err = rejection(lambda: verify(google.mint(email=email), keys))
    assert isinstance(err, Forbidden)
    assert (err.status, err.code) == (403, "oidc_wrong_sa")


def test_allowed_emails_given_as_one_string_is_a_programming_error(google: FakeGoogle, keys: JwksCache) -> None:
    with pytest.raises(TypeError):
        verify(google.mint(), keys, allowed_emails=SA)


# -- malformed -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    ["", "not-a-jwt", "a.b", "a.b.c.d", "!!!.###.$$$", b64url(b"[1]") + ".e30.", "x" * 20000 + ".a.b"],
)
def test_malformed_tokens_are_refused(keys: JwksCache, token: str) -> None:
    err = rejection(lambda: verify(token, keys))
    assert (err.status, err.code) == (401, "oidc_malformed")


def test_missing_kid_is_malformed(google: FakeGoogle, keys: JwksCache) -> None:
    token = jwt.encode(google.claims(), google.keys["k1"], algorithm="RS256")
    assert rejection(lambda: verify(token, keys)).code == "oidc_malformed"


@pytest.mark.parametrize(
    "claims",
    [{"exp": "tomorrow"}, {"exp": DROP}, {"iat": True}, {"iat": DROP}, {"sub": 42}, {"sub": DROP}],
)
def test_claims_of_the_wrong_type_are_malformed(google: FakeGoogle, keys: JwksCache, claims: dict[str, Any]) -> None:
    assert rejection(lambda: verify(google.mint(**claims), keys)).code == "oidc_malformed"


def test_signed_payload_that_is_not_an_object_is_malformed(google: FakeGoogle, keys: JwksCache) -> None:
    token = jwt.PyJWS().encode(b"[1, 2]", google.keys["k1"], algorithm="RS256", headers={"kid": "k1"})
    assert rejection(lambda: verify(token, keys)).code == "oidc_malformed"


def test_errors_never_echo_the_token(google: FakeGoogle, keys: JwksCache) -> None:
    for token in (google.mint(exp=1), google.mint(key=rsa_key("attacker")), google.mint(email="x@example.com")):
        err = rejection(functools.partial(verify, token, keys))
        signature = token.rsplit(".", 1)[1]
        assert signature not in json.dumps(err.to_dict()) and signature not in str(err)
