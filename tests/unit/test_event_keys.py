"""The stored form of idempotency keys (``noetl_cloud.eventlog.keys``): 16 bytes, led by the event's
execution id when it has one, the rest from the key's SHA-256."""

from __future__ import annotations

import hashlib
import uuid

from noetl_cloud.eventlog.keys import key_digest

EXECUTION = 384572860948287488


def test_a_key_of_an_execution_is_its_execution_id_then_64_bits_of_the_keys_sha256() -> None:
    key = f"default/default/{EXECUTION}/command/384572860956676099/1/issued"
    digest = key_digest(key, str(EXECUTION))
    assert isinstance(digest, uuid.UUID)
    assert digest.bytes == EXECUTION.to_bytes(8, "big") + hashlib.sha256(key.encode()).digest()[:8]
    assert key_digest(key, EXECUTION) == digest  # stable: the same key always lands on the same row


def test_later_executions_sort_after_earlier_ones_whatever_their_keys() -> None:
    # What keeps the index's inserts on its newest pages: the order of the ids, not of the keys.
    digests = [key_digest(f"k{n % 7}/{'z' * n}", EXECUTION + n) for n in range(0, 5000, 37)]
    assert [d.bytes for d in digests] == sorted(d.bytes for d in digests)


def test_a_key_of_no_execution_is_the_first_128_bits_of_its_sha256() -> None:
    key = "default/default/catalog/demo/orders/3"
    for none in (None, "", 0):
        assert key_digest(key, none).bytes == hashlib.sha256(key.encode()).digest()[:16]


def test_the_same_key_under_two_executions_is_two_keys() -> None:
    assert key_digest("retry/1", EXECUTION) != key_digest("retry/1", EXECUTION + 1) != key_digest("retry/1", None)


def test_keys_that_differ_only_past_16_bytes_or_at_the_last_character_get_different_digests() -> None:
    prefix = f"t/o/{EXECUTION}/command/384572860956676099/" + "x" * 440
    keys = [prefix + tail for tail in ("1/issued", "1/claimed", "2/issued", "1/issuee", "")]
    keys += ["a" * 511 + "b", "a" * 511 + "c", "a" * 512]  # the longest keys the envelope takes (512)
    for execution in (EXECUTION, None):
        assert len({key_digest(k, execution) for k in keys}) == len(keys)


def test_unicode_keys_are_digested_as_utf8() -> None:
    assert key_digest("ключ", None).bytes == hashlib.sha256("ключ".encode()).digest()[:16]
    assert key_digest("ключ", 7).bytes[8:] == hashlib.sha256("ключ".encode()).digest()[:8]
    assert key_digest("e\u0301", 7) != key_digest("\u00e9", 7)  # no normalization: the bytes as given
