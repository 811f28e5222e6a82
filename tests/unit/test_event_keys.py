"""The stored form of idempotency keys (``noetl_cloud.eventlog.keys``): a 16-byte digest of the whole key."""

from __future__ import annotations

import hashlib
import uuid

from noetl_cloud.eventlog.keys import key_digest


def test_the_digest_is_the_first_128_bits_of_the_keys_sha256() -> None:
    key = "default/default/384572860948287488/command/384572860956676099/1/issued"
    digest = key_digest(key)
    assert isinstance(digest, uuid.UUID)
    assert digest.bytes == hashlib.sha256(key.encode()).digest()[:16]
    assert key_digest(key) == digest  # stable: the same key always lands on the same row


def test_keys_that_differ_only_past_16_bytes_or_at_the_last_character_get_different_digests() -> None:
    prefix = "t/o/384572860948287488/command/384572860956676099/" + "x" * 440
    keys = [prefix + tail for tail in ("1/issued", "1/claimed", "2/issued", "1/issuee", "")]
    keys += ["a" * 511 + "b", "a" * 511 + "c", "a" * 512]  # the longest keys the envelope takes (512)
    assert len({key_digest(k) for k in keys}) == len(keys)


def test_unicode_keys_are_digested_as_utf8() -> None:
    assert key_digest("ключ").bytes == hashlib.sha256("ключ".encode()).digest()[:16]
    assert key_digest("e\u0301") != key_digest("\u00e9")  # no normalization: the bytes as given
