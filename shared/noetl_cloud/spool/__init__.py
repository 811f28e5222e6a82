"""Store-and-forward spool storage (RFC §8.2): the port, its item format and its adapters.

Adapters: :mod:`~noetl_cloud.spool.memory` (tests, embedded local mode),
:mod:`~noetl_cloud.spool.local_disk` (CLI), :mod:`~noetl_cloud.spool.gcs` and
:mod:`~noetl_cloud.spool.s3` (imported on demand: they pull in their cloud clients).
"""

from noetl_cloud.spool.item import (
    SpoolError,
    SpoolItem,
    SpoolItemCorrupted,
    SpoolItemExists,
    SpoolItemNotFound,
    SpoolRef,
    SpoolVersionConflict,
    object_name,
)
from noetl_cloud.spool.port import DEFAULT_LIMIT, ObjectSpool, SpoolBackend

__all__ = [
    "DEFAULT_LIMIT",
    "ObjectSpool",
    "SpoolBackend",
    "SpoolError",
    "SpoolItem",
    "SpoolItemCorrupted",
    "SpoolItemExists",
    "SpoolItemNotFound",
    "SpoolRef",
    "SpoolVersionConflict",
    "object_name",
]
