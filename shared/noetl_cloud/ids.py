"""Snowflake ids: the application-boundary id of every execution, event and command.

Layout of the 63-bit integer (the sign bit stays 0 so it fits PostgreSQL ``bigint``):

    41 bits  milliseconds since EPOCH (2024-01-01T00:00:00Z; lasts until 2093)
    10 bits  node id (0..1023)
    12 bits  sequence within the millisecond (4096 ids per ms per node)

Ids from one generator are strictly increasing, even when the wall clock steps back (the
generator keeps using its last millisecond) or a millisecond's 4096 sequence numbers run out (it
borrows the next millisecond instead of sleeping). Ids from different processes are unique when
their node ids differ: set ``NOETL_NODE_ID`` per instance where instances are few and known;
otherwise the node id is drawn at random per process, which keeps the chance that two of ``n``
live processes share one near ``n*n/2048`` - every table keyed by these ids also has a primary
key that refuses a duplicate rather than overwriting.

The string form (decimal) is what JSON carries: JavaScript cannot hold 63-bit integers.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
NODE_BITS = 10
SEQUENCE_BITS = 12
MAX_NODE = (1 << NODE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
TIMESTAMP_SHIFT = NODE_BITS + SEQUENCE_BITS


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SnowflakeGenerator:
    """Thread-safe snowflake id generator for one node."""

    def __init__(self, node_id: int | None = None, clock: Callable[[], int] = _now_ms) -> None:
        if node_id is None:
            node_id = secrets.randbelow(MAX_NODE + 1)
        if not 0 <= node_id <= MAX_NODE:
            raise ValueError(f"node id must be within 0..{MAX_NODE}, got {node_id}")
        self.node_id = node_id
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ms = -1
        self._sequence = 0
        self._node_bits = node_id << SEQUENCE_BITS

    def next_id(self) -> int:
        with self._lock:
            now = self._clock() - EPOCH_MS
            if now > self._last_ms:
                self._last_ms = now
                self._sequence = 0
            else:
                # Same millisecond, or the clock stepped back: keep counting on the last one.
                self._sequence += 1
                if self._sequence > MAX_SEQUENCE:
                    self._last_ms += 1
                    self._sequence = 0
            return (self._last_ms << TIMESTAMP_SHIFT) | self._node_bits | self._sequence

    def next_str(self) -> str:
        return str(self.next_id())


def parse(snowflake: int | str) -> tuple[datetime, int, int]:
    """Split an id into (UTC creation time, node id, sequence)."""
    value = int(snowflake)
    if value < 0 or value >= 1 << 63:
        raise ValueError(f"not a snowflake id: {snowflake!r}")
    ms = (value >> TIMESTAMP_SHIFT) + EPOCH_MS
    node = (value >> SEQUENCE_BITS) & MAX_NODE
    return datetime.fromtimestamp(ms / 1000, tz=UTC), node, value & MAX_SEQUENCE


#: The largest id a ``bigint`` column holds.
MAX_ID = 2**63 - 1


def id_from_text(value: object) -> int | None:
    """``value`` as an id (ASCII decimal digits, at most :data:`MAX_ID`), or ``None``: a number a
    ``bigint`` cannot hold, or a Unicode digit such as ``²`` that ``str.isdigit`` accepts and
    ``int`` refuses, is no id (a client error, never a database error)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    number = int(text)
    return number if number <= MAX_ID else None
