"""Push verification (RFC §6): vectors of the reference libraries, and every rejection's code and status."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jwt
import pytest
import stripe
from standardwebhooks.webhooks import Webhook

from noetl_cloud.auth.google_oidc import JwksCache, JwksUnavailable
from noetl_cloud.errors import ConfigError, NoetlError
from noetl_cloud.ingress.verify import (
    CREDENTIAL_HEADERS,
    Rejection,
    VerifiedIdentity,
    VerifyConfig,
    credential_headers,
    verify,
)
from noetl_cloud.spec.subscription import Verify
from tests.unit.test_google_oidc import AUDIENCE, SA, FakeGoogle, rsa_key

NOW = 1_700_000_000
SECRET = "n0etl-shared-s3cret"
BODY = b'{"event":"push","n":1}'

HMAC = VerifyConfig("hmac_sha256")
GITHUB = VerifyConfig("github")
STRIPE = VerifyConfig("stripe")
STANDARD = VerifyConfig("standard_webhooks")
BEARER = VerifyConfig("bearer")
OIDC = VerifyConfig("pubsub_oidc", audience=AUDIENCE, service_account=SA)

STRIPE_SECRET = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_STANDARD_SECRET = "whsec_" + base64.b64encode(b"a rotated-out key of 24 B").decode()


def clock(at: float = NOW) -> Callable[[], float]:
    return lambda: at


def rejected(call: Callable[[], object]) -> Rejection:
    with pytest.raises(Rejection) as info:
        call()
    return info.value


def assert_rejected(call: Callable[[], object], code: str, status: int = 401) -> Rejection:
    err = rejected(call)
    assert (err.code, err.status) == (code, status)
    assert err.to_dict()["code"] == code
    return err


def hex_hmac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def b64_hmac(secret: str, body: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


# -- hmac_sha256 ----------------------------------------------------------------------------------


def test_hmac_hex_signature_of_the_raw_body_passes() -> None:
    identity = verify(BODY, {"X-Signature": hex_hmac(SECRET, BODY)}, HMAC, SECRET, now=clock())
    assert identity == VerifiedIdentity("hmac_sha256", "shared-secret", None, None)


def test_hmac_hex_is_accepted_in_upper_case() -> None:
    verify(BODY, {"x-signature": hex_hmac(SECRET, BODY).upper()}, HMAC, SECRET)


def test_hmac_base64_signature_passes_when_configured() -> None:
    config = VerifyConfig("hmac_sha256", encoding="base64")
    assert verify(BODY, {"x-signature": b64_hmac(SECRET, BODY)}, config, SECRET).scheme == "hmac_sha256"


def test_hmac_prefix_is_stripped_when_configured() -> None:
    config = VerifyConfig("hmac_sha256", header="X-Shopify-Hmac", prefix="sha256=")
    verify(BODY, {"x-shopify-hmac": "sha256=" + hex_hmac(SECRET, BODY)}, config, SECRET)


def test_hmac_custom_header_is_looked_up_case_insensitively() -> None:
    config = VerifyConfig("hmac_sha256", header="x-acme-signature", encoding="base64")
    verify(BODY, {"X-ACME-Signature": b64_hmac(SECRET, BODY)}, config, SECRET)


def test_hmac_header_value_whitespace_is_trimmed() -> None:
    verify(BODY, {"x-signature": f" {hex_hmac(SECRET, BODY)}\t"}, HMAC, SECRET)


def test_hmac_configured_prefix_absent_is_malformed() -> None:
    config = VerifyConfig("hmac_sha256", prefix="sha256=")
    assert_rejected(
        lambda: verify(BODY, {"x-signature": hex_hmac(SECRET, BODY)}, config, SECRET), "malformed_signature"
    )


@pytest.mark.parametrize("headers", [{}, {"x-signature": ""}, {"x-signature": "  "}, {"x-other": "abc"}])
def test_hmac_missing_signature(headers: dict[str, str]) -> None:
    assert_rejected(lambda: verify(BODY, headers, HMAC, SECRET), "missing_signature")


@pytest.mark.parametrize(
    "value",
    [
        "not-hex",
        "ab" * 31,  # 31 bytes
        "ab" * 33,
        " ".join(["ab"] * 32),  # bytes.fromhex would take this; a digest header never looks like it
        "sha256=" + "ab" * 32,  # prefix not configured
        "é" * 64,
    ],
)
def test_hmac_undecodable_hex_is_malformed(value: str) -> None:
    assert_rejected(lambda: verify(BODY, {"x-signature": value}, HMAC, SECRET), "malformed_signature")


@pytest.mark.parametrize("value", ["!!!", base64.b64encode(b"short").decode(), "ab" * 32, "q83v" * 11])
def test_hmac_undecodable_base64_is_malformed(value: str) -> None:
    config = VerifyConfig("hmac_sha256", encoding="base64")
    assert_rejected(lambda: verify(BODY, {"x-signature": value}, config, SECRET), "malformed_signature")


@pytest.mark.parametrize(
    "signature",
    [hex_hmac(SECRET, BODY + b" "), hex_hmac(SECRET + "x", BODY), "00" * 32],
    ids=["body", "secret", "zero"],
)
def test_hmac_signature_of_another_body_or_secret_is_bad(signature: str) -> None:
    assert_rejected(lambda: verify(BODY, {"x-signature": signature}, HMAC, SECRET), "bad_signature")


def test_a_header_given_twice_with_different_values_is_malformed() -> None:
    headers = {"X-Signature": hex_hmac(SECRET, BODY), "x-signature": "00" * 32}
    assert_rejected(lambda: verify(BODY, headers, HMAC, SECRET), "malformed_signature")


def test_a_header_repeated_with_the_same_value_is_fine() -> None:
    signature = hex_hmac(SECRET, BODY)
    verify(BODY, {"X-Signature": signature, "x-signature": signature}, HMAC, SECRET)


# -- github ---------------------------------------------------------------------------------------

GITHUB_DOC_SECRET = "It's a Secret to Everybody"
GITHUB_DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_documented_vector_passes_with_the_delivery_id() -> None:
    headers = {"X-Hub-Signature-256": GITHUB_DOC_SIGNATURE, "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
    identity = verify(b"Hello, World!", headers, GITHUB, GITHUB_DOC_SECRET)
    assert identity == VerifiedIdentity("github", "shared-secret", "72d3162e-cc78-11e3-81ab-4c9367dc0958", None)


def test_github_without_a_delivery_header_has_no_message_id() -> None:
    identity = verify(b"Hello, World!", {"x-hub-signature-256": GITHUB_DOC_SIGNATURE}, GITHUB, GITHUB_DOC_SECRET)
    assert identity.message_id is None


def test_github_sha1_header_alone_is_a_missing_signature() -> None:
    sha1 = "sha1=" + hmac.new(SECRET.encode(), BODY, hashlib.sha1).hexdigest()
    assert_rejected(lambda: verify(BODY, {"X-Hub-Signature": sha1}, GITHUB, SECRET), "missing_signature")


@pytest.mark.parametrize("value", [hex_hmac(SECRET, BODY), "sha1=" + hex_hmac(SECRET, BODY), "sha256=xyz"])
def test_github_signature_without_sha256_prefix_or_hex_is_malformed(value: str) -> None:
    assert_rejected(lambda: verify(BODY, {"X-Hub-Signature-256": value}, GITHUB, SECRET), "malformed_signature")


def test_github_wrong_secret_or_body_is_a_bad_signature() -> None:
    headers = {"X-Hub-Signature-256": GITHUB_DOC_SIGNATURE}
    assert_rejected(lambda: verify(b"Hello, World!", headers, GITHUB, "another secret"), "bad_signature")
    assert_rejected(lambda: verify(b"Hello, World?", headers, GITHUB, GITHUB_DOC_SECRET), "bad_signature")


# -- stripe ---------------------------------------------------------------------------------------

STRIPE_BODY = json.dumps({"id": "evt_1", "object": "event", "type": "invoice.paid"}).encode()


def stripe_header(body: bytes = STRIPE_BODY, secret: str = STRIPE_SECRET, t: int = NOW) -> str:
    header: str = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=t)
    return header


def stripe_v1(body: bytes = STRIPE_BODY, secret: str = STRIPE_SECRET, t: int = NOW) -> str:
    signature: str = stripe.WebhookSignature._compute_signature(f"{t}.{body.decode()}", secret)
    return signature


def verify_stripe(
    header: str, *, body: bytes = STRIPE_BODY, at: float = NOW, config: VerifyConfig = STRIPE
) -> VerifiedIdentity:
    return verify(body, {"Stripe-Signature": header}, config, STRIPE_SECRET, now=clock(at))


def test_stripe_header_signed_by_the_stripe_library_passes() -> None:
    header = stripe_header()
    identity = verify(STRIPE_BODY, {"Stripe-Signature": header}, STRIPE, STRIPE_SECRET, now=clock())
    assert identity == VerifiedIdentity("stripe", "shared-secret", None, NOW)
    # the reference library accepts the very header we accept (tolerance 0 disables its clock check)
    assert stripe.Webhook.construct_event(STRIPE_BODY, header, STRIPE_SECRET, tolerance=0).id == "evt_1"


def test_stripe_any_v1_signature_may_match_and_v0_is_ignored() -> None:
    header = f"t={NOW},v0={'11' * 32},v1={'00' * 32},v1={stripe_v1()}"
    verify(STRIPE_BODY, {"stripe-signature": header}, STRIPE, STRIPE_SECRET, now=clock())
    stripe.Webhook.construct_event(STRIPE_BODY, header, STRIPE_SECRET, tolerance=0)


def test_stripe_valid_digest_under_v0_does_not_pass() -> None:
    header = f"t={NOW},v0={stripe_v1()}"
    assert_rejected(lambda: verify_stripe(header), "malformed_signature")


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_stripe_timestamp_within_tolerance_passes(offset: int) -> None:
    verify(STRIPE_BODY, {"stripe-signature": stripe_header()}, STRIPE, STRIPE_SECRET, now=clock(NOW + offset))


@pytest.mark.parametrize("offset", [-301, 301, 86_400])
def test_stripe_timestamp_out_of_tolerance_either_way(offset: int) -> None:
    assert_rejected(lambda: verify_stripe(stripe_header(), at=NOW + offset), "timestamp_out_of_tolerance")


def test_stripe_tolerance_is_configurable() -> None:
    config = VerifyConfig("stripe", tolerance_s=10)
    verify_stripe(stripe_header(), at=NOW + 10, config=config)
    assert_rejected(lambda: verify_stripe(stripe_header(), at=NOW + 11, config=config), "timestamp_out_of_tolerance")


def test_stripe_stale_forgery_is_a_bad_signature_not_a_stale_one() -> None:
    assert_rejected(lambda: verify_stripe(stripe_header(secret="whsec_other"), at=NOW + 10_000), "bad_signature")


def test_stripe_missing_header() -> None:
    assert_rejected(lambda: verify(STRIPE_BODY, {}, STRIPE, STRIPE_SECRET), "missing_signature")


@pytest.mark.parametrize(
    "header",
    [
        f"v1={'ab' * 32}",  # no t
        f"t={NOW},t={NOW},v1={'ab' * 32}",  # two t
        f"t=17e8,v1={'ab' * 32}",
        f"t=-{NOW},v1={'ab' * 32}",
        "t=\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660,v1=" + "ab" * 32,  # not ASCII digits
        f"t={NOW}",  # no v1
        f"t={NOW},v1=zz",
        "garbage",
    ],
)
def test_stripe_malformed_header(header: str) -> None:
    assert_rejected(lambda: verify_stripe(header), "malformed_signature")


@pytest.mark.parametrize(
    ("body", "header"),
    [
        (STRIPE_BODY + b" ", stripe_header()),
        (STRIPE_BODY, stripe_header().replace(f"t={NOW}", f"t={NOW + 1}")),
        (STRIPE_BODY, stripe_header(secret="whsec_other")),
    ],
    ids=["body", "timestamp", "secret"],
)
def test_stripe_bad_signature_for_tampered_body_timestamp_or_secret(body: bytes, header: str) -> None:
    assert_rejected(lambda: verify_stripe(header, body=body), "bad_signature")
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body, header, STRIPE_SECRET, tolerance=0)


# -- standard webhooks ----------------------------------------------------------------------------

MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"


def standard_signature(secret: str = STANDARD_SECRET, body: bytes = BODY, msg_id: str = MSG_ID, t: int = NOW) -> str:
    signature: str = Webhook(secret).sign(msg_id, datetime.fromtimestamp(t, UTC), body.decode())
    return signature


def standard_headers(signature: str | None = None, *, prefix: str = "webhook", t: int = NOW) -> dict[str, str]:
    return {
        f"{prefix}-id": MSG_ID,
        f"{prefix}-timestamp": str(t),
        f"{prefix}-signature": signature if signature is not None else standard_signature(t=t),
    }


def test_standard_webhooks_signed_by_the_reference_library_passes() -> None:
    identity = verify(BODY, standard_headers(), STANDARD, STANDARD_SECRET, now=clock())
    assert identity == VerifiedIdentity("standard_webhooks", "shared-secret", MSG_ID, NOW)


def test_standard_webhooks_svix_header_names_pass() -> None:
    identity = verify(BODY, standard_headers(prefix="svix"), STANDARD, STANDARD_SECRET, now=clock())
    assert identity.message_id == MSG_ID


def test_standard_webhooks_rotated_secret_second_signature_matches() -> None:
    rotated = f"{standard_signature(OTHER_STANDARD_SECRET)} {standard_signature()}"
    verify(BODY, standard_headers(rotated), STANDARD, STANDARD_SECRET, now=clock())
    assert_rejected(
        lambda: verify(BODY, standard_headers(rotated), STANDARD, "whsec_" + "A" * 32, now=clock()), "bad_signature"
    )


def test_standard_webhooks_asymmetric_v1a_entries_are_skipped() -> None:
    signature = f"v1a,{base64.b64encode(b'x' * 64).decode()} {standard_signature()}"
    verify(BODY, standard_headers(signature), STANDARD, STANDARD_SECRET, now=clock())


def test_standard_webhooks_secret_without_prefix_or_padding_is_accepted() -> None:
    raw = base64.b64encode(b"a key of 22 bytes, ok!").decode()
    assert raw.endswith("=")
    signature = standard_signature("whsec_" + raw)
    verify(BODY, standard_headers(signature), STANDARD, raw.rstrip("="), now=clock())


def test_standard_webhooks_header_we_accept_is_accepted_by_the_reference_library() -> None:
    # not a tolerance check: the library reads the real clock, so both sides use it here
    t = int(time.time())
    headers = standard_headers(standard_signature(t=t), t=t)
    verify(BODY, headers, STANDARD, STANDARD_SECRET)
    Webhook(STANDARD_SECRET).verify(BODY, headers, json_parse=False)


@pytest.mark.parametrize("offset", [-300, 300])
def test_standard_webhooks_timestamp_at_the_tolerance_edge_passes(offset: int) -> None:
    verify(BODY, standard_headers(), STANDARD, STANDARD_SECRET, now=clock(NOW + offset))


@pytest.mark.parametrize("offset", [-301, 301])
def test_standard_webhooks_timestamp_out_of_tolerance_either_way(offset: int) -> None:
    assert_rejected(
        lambda: verify(BODY, standard_headers(), STANDARD, STANDARD_SECRET, now=clock(NOW + offset)),
        "timestamp_out_of_tolerance",
    )


@pytest.mark.parametrize("drop", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_standard_webhooks_missing_header(drop: str) -> None:
    headers = standard_headers()
    del headers[drop]
    assert_rejected(lambda: verify(BODY, headers, STANDARD, STANDARD_SECRET, now=clock()), "missing_signature")


def test_standard_webhooks_families_do_not_mix() -> None:
    headers = {"webhook-signature": standard_signature(), "svix-id": MSG_ID, "svix-timestamp": str(NOW)}
    assert_rejected(lambda: verify(BODY, headers, STANDARD, STANDARD_SECRET, now=clock()), "missing_signature")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("webhook-timestamp", "17e8"),
        ("webhook-timestamp", f"{NOW}.5"),
        ("webhook-signature", "v1,not base64!"),
        ("webhook-signature", "v1," + base64.b64encode(b"short").decode()),
        ("webhook-signature", "v2," + base64.b64encode(b"x" * 32).decode()),
        ("webhook-signature", "no-comma"),
    ],
)
def test_standard_webhooks_malformed_headers(name: str, value: str) -> None:
    headers = {**standard_headers(), name: value}
    assert_rejected(lambda: verify(BODY, headers, STANDARD, STANDARD_SECRET, now=clock()), "malformed_signature")


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (BODY, {**standard_headers(), "webhook-id": "msg_other"}),
        (BODY, {**standard_headers(), "webhook-timestamp": str(NOW + 1)}),
        (BODY + b"\n", standard_headers()),
        (BODY, standard_headers(standard_signature(OTHER_STANDARD_SECRET))),
    ],
    ids=["id", "timestamp", "body", "secret"],
)
def test_standard_webhooks_id_timestamp_and_body_are_all_signed(body: bytes, headers: dict[str, str]) -> None:
    assert_rejected(lambda: verify(body, headers, STANDARD, STANDARD_SECRET, now=clock()), "bad_signature")


def test_standard_webhooks_secret_that_is_not_base64_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        verify(BODY, standard_headers(), STANDARD, "whsec_not*base64", now=clock())


# -- bearer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme_word", ["Bearer", "bearer", "BEARER"])
def test_bearer_token_in_authorization_passes(scheme_word: str) -> None:
    identity = verify(BODY, {"Authorization": f"{scheme_word} {SECRET}"}, BEARER, SECRET)
    assert identity == VerifiedIdentity("bearer", "shared-secret", None, None)


@pytest.mark.parametrize("value", [SECRET, f"Bearer {SECRET}"])
def test_bearer_custom_header_takes_the_raw_token_or_bearer(value: str) -> None:
    config = VerifyConfig("bearer", header="X-Webhook-Token")
    verify(BODY, {"x-webhook-token": value}, config, SECRET)


@pytest.mark.parametrize("headers", [{}, {"authorization": ""}, {"x-webhook-token": SECRET}])
def test_bearer_missing_token(headers: dict[str, str]) -> None:
    assert_rejected(lambda: verify(BODY, headers, BEARER, SECRET), "missing_token")


@pytest.mark.parametrize(
    "value",
    [
        "Bearer wrong",
        f"Bearer {SECRET[:-1]}",
        f"Bearer {SECRET}x",
        f"Bearer {SECRET.upper()}",
        SECRET,  # raw token in authorization: the Bearer scheme is required there
        f"Basic {SECRET}",
        "Bearer",
        f"Bearer {SECRET} extra",
        "Bearer \ud800",
    ],
)
def test_bearer_wrong_token(value: str) -> None:
    assert_rejected(lambda: verify(BODY, {"authorization": value}, BEARER, SECRET), "bad_token")


def test_bearer_custom_header_wrong_token() -> None:
    config = VerifyConfig("bearer", header="x-webhook-token")
    assert_rejected(lambda: verify(BODY, {"X-Webhook-Token": "Bearer nope"}, config, SECRET), "bad_token")


def test_bearer_compares_equal_length_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    with pytest.raises(Rejection):
        verify(BODY, {"authorization": "Bearer x"}, BEARER, SECRET)
    assert seen == [(32, 32)]


# -- pubsub_oidc ----------------------------------------------------------------------------------


@pytest.fixture
def google() -> FakeGoogle:
    return FakeGoogle()


@pytest.fixture
def jwks(google: FakeGoogle) -> JwksCache:
    return JwksCache("https://keys.test/certs", fetch=google.fetch, clock=lambda: 0.0)


def oidc(token: str, jwks: JwksCache, config: VerifyConfig = OIDC) -> VerifiedIdentity:
    return verify(BODY, {"Authorization": f"Bearer {token}"}, config, None, now=clock(), jwks=jwks)


def test_pubsub_oidc_valid_token_proves_the_service_account(google: FakeGoogle, jwks: JwksCache) -> None:
    assert oidc(google.mint(), jwks) == VerifiedIdentity("pubsub_oidc", SA, None, None)


def test_pubsub_oidc_matching_jwks_url_passes(google: FakeGoogle, jwks: JwksCache) -> None:
    config = VerifyConfig("pubsub_oidc", audience=AUDIENCE, service_account=SA, jwks_url="https://keys.test/certs")
    oidc(google.mint(), jwks, config)


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["email"] = "attacker@example.com"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


@pytest.mark.parametrize(
    ("make", "code", "status"),
    [
        (lambda g: g.mint(aud="https://another-service"), "oidc_wrong_audience", 401),
        (lambda g: g.mint(iss="https://evil.example"), "oidc_wrong_issuer", 401),
        (lambda g: g.mint(email="other@noetl-prod.iam.gserviceaccount.com"), "oidc_wrong_sa", 403),
        (lambda g: g.mint(email_verified=False), "oidc_unverified_email", 401),
        (lambda g: g.mint(exp=NOW - 3600, iat=NOW - 7200), "oidc_expired", 401),
        (lambda g: tampered(g.mint()), "oidc_bad_signature", 401),
        (lambda g: g.mint(key=rsa_key("stranger")), "oidc_bad_signature", 401),
        (lambda g: g.mint(kid="k9", key=rsa_key("k9")), "oidc_unknown_kid", 401),
        (lambda g: jwt.encode(g.claims(), "", algorithm="none", headers={"kid": "k1"}), "oidc_bad_algorithm", 401),
        (lambda g: "not.a.jwt", "oidc_malformed", 401),
    ],
)
def test_pubsub_oidc_rejections_keep_their_codes(
    google: FakeGoogle, jwks: JwksCache, make: Callable[[FakeGoogle], str], code: str, status: int
) -> None:
    token = make(google)
    err = assert_rejected(lambda: oidc(token, jwks), code, status)
    assert token not in err.message


@pytest.mark.parametrize(("headers", "code"), [({}, "missing_token"), ({"authorization": "Basic abc"}, "bad_token")])
def test_pubsub_oidc_without_a_bearer_token(jwks: JwksCache, headers: dict[str, str], code: str) -> None:
    assert_rejected(lambda: verify(BODY, headers, OIDC, None, now=clock(), jwks=jwks), code)


def test_pubsub_oidc_jwks_outage_is_retryable_not_a_rejection(google: FakeGoogle, jwks: JwksCache) -> None:
    google.fail = OSError("down")
    with pytest.raises(JwksUnavailable) as info:
        oidc(google.mint(), jwks)
    assert not isinstance(info.value, Rejection)
    assert (info.value.status, info.value.retryable) == (503, True)


@pytest.mark.parametrize(
    "config",
    [
        VerifyConfig("pubsub_oidc", service_account=SA),
        VerifyConfig("pubsub_oidc", audience=AUDIENCE),
        VerifyConfig("pubsub_oidc", audience=AUDIENCE, service_account=SA, jwks_url="https://elsewhere.test/certs"),
    ],
)
def test_pubsub_oidc_incomplete_config_is_a_config_error(
    google: FakeGoogle, jwks: JwksCache, config: VerifyConfig
) -> None:
    with pytest.raises(ConfigError):
        oidc(google.mint(), jwks, config)


def test_pubsub_oidc_without_a_jwks_cache_is_a_config_error(google: FakeGoogle) -> None:
    with pytest.raises(ConfigError):
        verify(BODY, {"authorization": f"Bearer {google.mint()}"}, OIDC, None, now=clock())


# -- scheme dispatch and config -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["none", "", "hmac", "HMAC_SHA256", "unknown"])
def test_none_and_unknown_schemes_never_pass(kind: str) -> None:
    headers = {"x-signature": hex_hmac(SECRET, BODY), "authorization": f"Bearer {SECRET}"}
    assert_rejected(lambda: verify(BODY, headers, VerifyConfig(kind), SECRET), "unsupported_scheme", 403)


@pytest.mark.parametrize("kind", ["hmac_sha256", "github", "stripe", "standard_webhooks", "bearer"])
@pytest.mark.parametrize("secret", [None, ""])
def test_secret_schemes_without_a_secret_are_a_config_error(kind: str, secret: str | None) -> None:
    with pytest.raises(ConfigError):
        verify(BODY, {"authorization": "Bearer "}, VerifyConfig(kind), secret)


def test_config_from_mapping_ignores_secret_keys_and_fills_defaults() -> None:
    data = {"type": "hmac_sha256", "secret": "wallet/alias", "secret_alias": "x", "encoding": None, "header": "X-Sig"}
    assert VerifyConfig.from_mapping(data) == VerifyConfig("hmac_sha256", header="x-sig")
    assert VerifyConfig.from_mapping({"type": "stripe", "tolerance_s": None}).tolerance_s == 300


def test_config_from_a_catalog_verify_model_round_trips() -> None:
    model = Verify(type="pubsub_oidc", audience=AUDIENCE, service_account=SA, tolerance_s=60)
    config = VerifyConfig.from_mapping(model.model_dump(mode="json"))
    assert config == VerifyConfig("pubsub_oidc", tolerance_s=60, audience=AUDIENCE, service_account=SA)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": 1},
        {"type": "hmac_sha256", "encoding": "base32"},
        {"type": "stripe", "tolerance_s": -1},
        {"type": "stripe", "tolerance_s": True},
        {"type": "stripe", "tolerance_s": "300"},
        {"type": "bearer", "header": 7},
    ],
)
def test_config_from_mapping_rejects_wrong_types(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        VerifyConfig.from_mapping(data)


def test_credential_headers_cover_every_scheme_and_the_configured_header() -> None:
    expected = {"authorization", "cookie", "x-hub-signature", "x-hub-signature-256", "stripe-signature"}
    expected |= {"webhook-signature", "svix-signature", "x-signature"}
    assert expected <= CREDENTIAL_HEADERS
    assert all(name == name.lower() for name in CREDENTIAL_HEADERS)
    assert credential_headers(VerifyConfig("bearer", header="X-Webhook-Token")) == CREDENTIAL_HEADERS | {
        "x-webhook-token"
    }
    assert credential_headers(HMAC) == CREDENTIAL_HEADERS


FORGED = hex_hmac("forger", BODY)
TOKEN = "tok_" + "z" * 40


@pytest.mark.parametrize(
    ("config", "headers"),
    [
        (HMAC, {"x-signature": FORGED}),
        (VerifyConfig("hmac_sha256", prefix="sha256="), {"x-signature": FORGED}),
        (GITHUB, {"x-hub-signature-256": "sha256=" + FORGED}),
        (STRIPE, {"stripe-signature": f"t={NOW},v1={FORGED}"}),
        (STANDARD, standard_headers(standard_signature(OTHER_STANDARD_SECRET))),
        (BEARER, {"authorization": f"Bearer {TOKEN}"}),
        (VerifyConfig("bearer", header="x-token"), {"x-token": TOKEN}),
    ],
    ids=lambda value: value.type if isinstance(value, VerifyConfig) else "",
)
def test_no_rejection_echoes_a_secret_signature_or_token(config: VerifyConfig, headers: dict[str, str]) -> None:
    secret = STANDARD_SECRET if config.type == "standard_webhooks" else SECRET
    err: NoetlError = rejected(lambda: verify(BODY, headers, config, secret, now=clock()))
    text = json.dumps(err.to_dict()) + str(err) + repr(err.details)
    for value in (secret, FORGED, TOKEN, *headers.values()):
        assert value not in text


@pytest.mark.parametrize(("encoding", "tolerance_s"), [("base32", 300), ("hex", -1)])
def test_config_built_directly_is_validated_too(encoding: str, tolerance_s: int) -> None:
    with pytest.raises(ConfigError):
        VerifyConfig("hmac_sha256", encoding=encoding, tolerance_s=tolerance_s)
