"""Coordination key-value state: the port, its in-memory and Firestore adapters."""

from noetl_cloud.kv.port import Entry, KeyValueStore, KeyValueStoreError, Lease, ValueTooLarge, VersionConflict

__all__ = ["Entry", "KeyValueStore", "KeyValueStoreError", "Lease", "ValueTooLarge", "VersionConflict"]
