"""Property: without the secret, no header set and no body ever verifies, under any scheme."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noetl_cloud.auth.google_oidc import JwksCache
from noetl_cloud.ingress.verify import Rejection, VerifyConfig, verify
from tests.unit.test_google_oidc import AUDIENCE, SA, FakeGoogle

NOW = 1_700_000_000
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # a valid key for every secret scheme
CUSTOM = "x-listener-token"

CONFIGS = [
    VerifyConfig("hmac_sha256"),
    VerifyConfig("hmac_sha256", encoding="base64", prefix="sha256="),
    VerifyConfig("hmac_sha256", header=CUSTOM),
    VerifyConfig("github"),
    VerifyConfig("stripe"),
    VerifyConfig("standard_webhooks"),
    VerifyConfig("bearer"),
    VerifyConfig("bearer", header=CUSTOM),
    VerifyConfig("pubsub_oidc", audience=AUDIENCE, service_account=SA),
    VerifyConfig("none"),
]

NAMES = [
    "authorization",
    "cookie",
    "x-signature",
    "x-hub-signature",
    "x-hub-signature-256",
    "x-github-delivery",
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-noetl-route",
    "x-noetl-playbook",
    "content-type",
    CUSTOM,
]


digest = st.binary(min_size=32, max_size=32)
hex_digest = digest.map(bytes.hex)
b64_digest = digest.map(lambda d: base64.b64encode(d).decode())
timestamp = st.integers(NOW - 400, NOW + 400).map(str)
b64url = st.binary(min_size=1, max_size=48).map(lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode())

near_miss_tokens = st.sampled_from([SECRET[:-1], SECRET + "x", SECRET.upper(), SECRET[1:]])
bearer = st.one_of(
    st.builds("Bearer {}".format, st.text(min_size=1, max_size=60)),
    st.builds("Bearer {}.{}.{}".format, b64url, b64url, b64url),
    st.builds("Bearer {}".format, near_miss_tokens),
)
hmac_value = st.one_of(hex_digest, b64_digest, st.builds("sha256={}".format, hex_digest | b64_digest))
stripe_value = st.one_of(
    st.builds("t={},v1={}".format, timestamp, hex_digest),
    st.builds("t={},v0={},v1={}".format, timestamp, hex_digest, hex_digest),
)
standard_value = st.lists(st.builds("v1,{}".format, b64_digest), min_size=1, max_size=3).map(" ".join)
# Per header: a value shaped like that header's real credential (so verification gets past parsing),
# another header's shape, or noise.
SHAPED = {
    "authorization": bearer,
    "x-signature": hmac_value,
    CUSTOM: st.one_of(hmac_value, near_miss_tokens, bearer),
    "x-hub-signature": st.builds("sha1={}".format, hex_digest),
    "x-hub-signature-256": st.builds("sha256={}".format, hex_digest),
    "stripe-signature": stripe_value,
    "webhook-signature": standard_value,
    "svix-signature": standard_value,
    "webhook-timestamp": timestamp,
    "svix-timestamp": timestamp,
    "webhook-id": st.builds("msg_{}".format, st.text(max_size=20)),
    "svix-id": st.builds("msg_{}".format, st.text(max_size=20)),
}
any_shape = st.one_of(*SHAPED.values())
noise = st.text(max_size=80)


def _recased(headers: dict[str, str]) -> st.SearchStrategy[dict[str, str]]:
    cases = st.lists(st.sampled_from([str.lower, str.upper, str.title]), min_size=len(headers), max_size=len(headers))
    return cases.map(lambda fs: {f(name): value for f, (name, value) in zip(fs, headers.items(), strict=True)})


FAMILIES = [
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
    ("svix-id", "svix-timestamp", "svix-signature"),
    ("stripe-signature",),
    ("x-hub-signature-256",),
    ("x-signature",),
    ("authorization",),
]
# Either every header of one scheme, well shaped, or any subset of the known names with any values.
complete = st.sampled_from(FAMILIES).flatmap(lambda names: st.fixed_dictionaries({n: SHAPED[n] for n in names}))
partial = st.fixed_dictionaries(
    {}, optional={name: st.one_of(SHAPED.get(name, noise), any_shape, noise) for name in NAMES}
)
credentials = st.one_of(complete, partial).flatmap(_recased)
headers = st.builds(
    lambda creds, extra: {**extra, **creds}, credentials, st.dictionaries(st.text(min_size=1, max_size=30), noise)
)


@pytest.fixture(scope="module")
def jwks() -> JwksCache:
    return JwksCache("https://keys.test/certs", fetch=FakeGoogle().fetch, clock=lambda: 0.0)


@settings(max_examples=300, deadline=None)
@given(config=st.sampled_from(CONFIGS), headers=headers, body=st.binary(max_size=512))
def test_random_headers_and_bodies_never_verify(
    jwks: JwksCache, config: VerifyConfig, headers: dict[str, str], body: bytes
) -> None:
    with pytest.raises(Rejection):
        verify(body, headers, config, SECRET, now=lambda: NOW, jwks=jwks)


def _signed_headers(config: VerifyConfig, body: bytes) -> dict[str, str]:
    mac = hmac.new(SECRET.encode(), body, hashlib.sha256)
    if config.type == "github":
        return {"X-Hub-Signature-256": "sha256=" + mac.hexdigest()}
    stripe_mac = hmac.new(SECRET.encode(), f"{NOW}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={NOW},v1={stripe_mac}"}


@settings(max_examples=300, deadline=None)
@given(
    config=st.sampled_from([VerifyConfig("github"), VerifyConfig("stripe")]),
    body=st.binary(max_size=256),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_a_signed_body_verifies_and_any_changed_byte_does_not(
    config: VerifyConfig, body: bytes, position: int, flip: int
) -> None:
    signed = _signed_headers(config, body)
    assert verify(body, signed, config, SECRET, now=lambda: NOW).scheme == config.type
    changed = bytearray(body + b"\x00")
    changed[position % len(changed)] ^= flip
    with pytest.raises(Rejection) as info:
        verify(bytes(changed), signed, config, SECRET, now=lambda: NOW)
    assert (info.value.code, info.value.status) == ("bad_signature", 401)
