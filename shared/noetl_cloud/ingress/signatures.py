"""The primitives of push verification: HMAC, digest decoding, and the parsing of credential headers.

Everything here is pure and policy-free: a parser returns ``None`` (or an empty list) for a value
it cannot read, and :mod:`noetl_cloud.ingress.verify` decides what that means for the request.
Nothing here logs, and nothing here keeps a secret, a signature or a token beyond the call.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

SHA256_BYTES = 32

_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
# A signed unix timestamp in seconds: ASCII digits only (``int()`` would also take other scripts' digits).
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}", re.ASCII)
# RFC 9110 bearer: the scheme word in any case, one or more spaces, a token68-like value.
_BEARER = re.compile(r"(?i:bearer) +(\S+)", re.ASCII)
_OWS = " \t"


class HeaderView(Mapping[str, str]):
    """A read-only, case-insensitive view of request headers, with HTTP whitespace trimmed from values.

    A name given more than once in different case with different values (``{"X-Sig": a, "x-sig": b}``)
    is *ambiguous*: which one a framework would pick is not ours to guess, so verification refuses it.
    """

    def __init__(self, headers: Mapping[str, str]) -> None:
        values: dict[str, str] = {}
        ambiguous: set[str] = set()
        for name, value in headers.items():
            key = name.lower()
            trimmed = value.strip(_OWS)
            if key in values and values[key] != trimmed:
                ambiguous.add(key)
            values[key] = trimmed
        self._values = values
        self.ambiguous = frozenset(ambiguous)

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def hmac_sha256(key: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of the concatenation of ``parts`` (fed in turn, so a large body is never copied)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def any_match(expected: bytes, candidates: Iterable[bytes]) -> bool:
    """Whether any candidate equals ``expected``; every comparison is constant-time."""
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(expected, candidate)
    return matched


def same_secret(presented: bytes, expected: bytes) -> bool:
    """Constant-time equality that does not leak the length either: the SHA-256 digests are compared."""
    return hmac.compare_digest(hashlib.sha256(presented).digest(), hashlib.sha256(expected).digest())


def decode_hex_digest(value: str) -> bytes | None:
    """The 32 bytes of a hex SHA-256 digest (either case), or ``None`` when ``value`` is not one."""
    if not _HEX_DIGEST.fullmatch(value):
        return None
    return bytes.fromhex(value)


def decode_base64_digest(value: str) -> bytes | None:
    """The 32 bytes of a standard base64 SHA-256 digest, or ``None`` when ``value`` is not one."""
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    return raw if len(raw) == SHA256_BYTES else None


def unix_seconds(value: str) -> int | None:
    """A unix timestamp written as ASCII digits, or ``None``."""
    return int(value) if _UNIX_SECONDS.fullmatch(value) else None


def utf8(value: str) -> bytes | None:
    """``value`` as UTF-8, or ``None`` for a string no request could carry (a lone surrogate)."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        return None


def bearer_token(value: str) -> str | None:
    """The token of ``Bearer <token>`` (scheme word in any case), or ``None`` for anything else."""
    match = _BEARER.fullmatch(value)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class StripeHeader:
    """A parsed ``Stripe-Signature``: ``t`` as written (``None`` when absent or given twice) and the v1 values."""

    timestamp: str | None
    v1: tuple[str, ...]


def parse_stripe_header(value: str) -> StripeHeader:
    """Split ``t=<unix>,v1=<hex>[,v1=<hex>...]``; other schemes (``v0``) and stray items are ignored."""
    timestamps: list[str] = []
    signatures: list[str] = []
    for item in value.split(","):
        key, sep, field = item.strip(_OWS).partition("=")
        if not sep:
            continue
        if key == "t":
            timestamps.append(field)
        elif key == "v1":
            signatures.append(field)
    return StripeHeader(timestamps[0] if len(timestamps) == 1 else None, tuple(signatures))


def parse_standard_signatures(value: str) -> list[str]:
    """The base64 values of the ``v1,<base64>`` entries of a space-separated ``webhook-signature``.

    Other versions (``v1a``, the asymmetric scheme) and entries without a comma are skipped.
    """
    signatures: list[str] = []
    for entry in value.split():
        version, sep, signature = entry.partition(",")
        if sep and version == "v1":
            signatures.append(signature)
    return signatures


def standard_webhooks_key(secret: str) -> bytes | None:
    """The HMAC key of a Standard Webhooks secret: base64 after an optional ``whsec_`` prefix.

    Unpadded base64 is accepted, as the reference library does. ``None`` when the secret is not
    base64 or decodes to nothing.
    """
    encoded = secret.strip().removeprefix("whsec_")
    try:
        key = base64.b64decode((encoded + "=" * (-len(encoded) % 4)).encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    return key or None
