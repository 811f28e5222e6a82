"""The payload store port (spec §9): content-addressed immutable objects, and Arrow IPC row windows."""

from noetl_cloud.payload.arrow import ARROW_STREAM, ArrowWindow, ipc_to_rows, load_rows, rows_to_ipc, store_rows
from noetl_cloud.payload.port import (
    InvalidPayloadUri,
    ObjectPayloadStore,
    PayloadCorrupted,
    PayloadError,
    PayloadNotFound,
    PayloadReference,
    PayloadStore,
    PayloadUnavailable,
    object_key,
    payload_uri,
)

__all__ = [
    "ARROW_STREAM",
    "ArrowWindow",
    "InvalidPayloadUri",
    "ObjectPayloadStore",
    "PayloadCorrupted",
    "PayloadError",
    "PayloadNotFound",
    "PayloadReference",
    "PayloadStore",
    "PayloadUnavailable",
    "ipc_to_rows",
    "load_rows",
    "object_key",
    "payload_uri",
    "rows_to_ipc",
    "store_rows",
]
