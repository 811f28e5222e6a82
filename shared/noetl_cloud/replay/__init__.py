"""Replay and time travel: reducers, checksums, upcasters, snapshots (pure), and their Postgres reader.

The pure core (``state``, ``reducers``, ``upcasters``, ``snapshots``, ``payloads``) takes data and
returns data; ``postgres`` holds the SQL; ``service`` and ``api`` serve ``GET /api/replay/state``
and ``GET /api/replay/verify``. The projector folds with the very same reducers.
"""

from noetl_cloud.replay.reducers import REDUCER_VERSION, fold
from noetl_cloud.replay.state import CHECKSUM_ALGORITHM, SURFACES, ReplayState
from noetl_cloud.replay.upcasters import UpcasterRegistry, default_registry

__all__ = [
    "CHECKSUM_ALGORITHM",
    "REDUCER_VERSION",
    "SURFACES",
    "ReplayState",
    "UpcasterRegistry",
    "default_registry",
    "fold",
]
