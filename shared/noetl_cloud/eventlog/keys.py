"""The stored form of an idempotency key: a 16-byte digest (issue #26, migration 0012).

``event_key`` guards the keys of ``event`` (the event row keeps the key's text: it is part of the sealed
envelope). Its primary key is the first 128 bits of the key's SHA-256, as a ``uuid``: 16 fixed bytes a
row and an index entry, whatever the key's length (keys run to 512 characters). A collision would need
about 2^64 keys (birthday bound) and cannot be steered by choosing keys, unlike MD5's.

The digest is computed the same way on both sides: in Python by the appends, in SQL by the migration,
retention (which deletes a dropped partition's keys) and the bench's seeding (:data:`KEY_DIGEST_SQL`).
"""

from __future__ import annotations

import hashlib
import uuid

# ``{}`` is a SQL text expression (a column, a bind): its key digest as a ``uuid``.
KEY_DIGEST_SQL = "CAST(encode(substring(sha256(convert_to({}, 'UTF8')) FROM 1 FOR 16), 'hex') AS uuid)"


def key_digest(key: str) -> uuid.UUID:
    """The digest ``event_key`` stores for ``key`` (what :data:`KEY_DIGEST_SQL` computes in SQL)."""
    return uuid.UUID(bytes=hashlib.sha256(key.encode("utf-8")).digest()[:16])
