"""The stored form of an idempotency key: 16 bytes led by its execution (issue #26, migrations 0012
and 0016).

``event_key`` guards the keys of ``event`` (the event row keeps the key's text: it is part of the sealed
envelope). A key is unique within its execution, as the keys the runtime writes are
(``<tenant>/<org>/<execution id>/...``, the specification's form), and the keys of events of no
execution (catalog, subscriptions) are unique among them. Its primary key is a ``uuid``, 16 fixed
bytes a row and an index entry whatever the key's length (keys run to 512 characters):

* a key of an execution: the execution id (8 bytes, big-endian), then the first 8 bytes of the key's
  SHA-256. Execution ids are snowflakes that grow with time, so the keys a start writes land on the
  index's newest pages, which stay cached (as a UUIDv7's time prefix does); a digest alone sent each
  insert to a random leaf of an index that outgrew the cache at a few hundred thousand executions
  (``docs/performance.md``, "scale"). Two keys of one execution collide with odds of about one in
  2^64; a collision within one execution needs about 2^32 of its keys (birthday bound);
* a key of no execution: the first 16 bytes of the key's SHA-256 (a collision would need about 2^64
  such keys).

Neither can be steered by choosing keys, unlike MD5. The digest is computed the same way on both
sides: in Python by the appends, in SQL by retention (which deletes a dropped partition's keys) and the
bench's seeding (:data:`KEY_DIGEST_SQL`).
"""

from __future__ import annotations

import hashlib
import uuid

# ``{k}`` and ``{x}`` are SQL text expressions (columns, binds): a key and its event's execution id
# (NULL or 0 for none); the whole is the key's digest as a ``uuid``.
KEY_DIGEST_SQL = (
    "CAST(CASE WHEN COALESCE({x}, 0) = 0 "
    "THEN encode(substring(sha256(convert_to({k}, 'UTF8')) FROM 1 FOR 16), 'hex') "
    "ELSE lpad(to_hex({x}), 16, '0') || encode(substring(sha256(convert_to({k}, 'UTF8')) FROM 1 FOR 8), 'hex') "
    "END AS uuid)"
)


def key_digest(key: str, execution_id: str | int | None) -> uuid.UUID:
    """The digest ``event_key`` stores for ``key`` of an event of ``execution_id`` (what
    :data:`KEY_DIGEST_SQL` computes in SQL)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    if not execution_id or not int(execution_id):
        return uuid.UUID(bytes=digest[:16])
    return uuid.UUID(bytes=int(execution_id).to_bytes(8, "big") + digest[:8])
