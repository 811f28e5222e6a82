"""Which spool backend a subscription uses, opened once per process.

A subscription names its backend in ``spool.backend`` (``gcs``, ``s3``, ``local_disk``) with its
own ``spool.bucket`` / ``spool.path``, or falls back to the deployment's ``NOETL_SPOOL_BUCKET`` /
``NOETL_SPOOL_DIR``. ``NOETL_SPOOL_BACKEND`` overrides all of that: one spool for every
subscription of the deployment (what a local stack or a single-bucket deployment wants), which is
also the spool the drainer lists to find subscriptions with spooled items.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings
from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool.port import SpoolBackend


class Backends(Protocol):
    """Opens the backend of a subscription's ``spool`` block."""

    def resolve(self, spool: Spool) -> tuple[SpoolBackend, str]:
        """The backend and its label (``gcs://bucket``, ``local_disk:///dir``) for events and operators."""
        ...

    def default(self) -> tuple[SpoolBackend, str] | None:
        """The deployment's own spool, when it has one (listed to discover spooled subscriptions)."""
        ...


class FixedBackend:
    """One backend for every subscription (unit tests, the embedded local mode, benchmarks)."""

    def __init__(self, backend: SpoolBackend, label: str = "memory") -> None:
        self.backend = backend
        self.label = label

    def resolve(self, spool: Spool) -> tuple[SpoolBackend, str]:
        return self.backend, self.label

    def default(self) -> tuple[SpoolBackend, str] | None:
        return self.backend, self.label


class SettingsBackends:
    """Backends from the settings and the ``spool`` blocks, each opened once and cached."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._open: dict[tuple[str, str], SpoolBackend] = {}
        self._lock = threading.Lock()

    def location(self, spool: Spool | None) -> tuple[str, str]:
        """``(backend, bucket or folder)`` of a spool block (``None``: the deployment's spool)."""
        s = self.settings
        kind = s.spool_backend or (spool.backend if spool is not None else None)
        if kind is None:
            raise ConfigError("no spool backend: set spool.backend or NOETL_SPOOL_BACKEND", code="config_missing")
        if kind == "nats_object":
            raise ConfigError("the nats_object spool backend is not available on Google Cloud", code="config_invalid")
        own = None if s.spool_backend or spool is None else (spool.path if kind == "local_disk" else spool.bucket)
        where = own or (s.spool_dir if kind == "local_disk" else s.spool_bucket)
        if not where:
            variable = "NOETL_SPOOL_DIR" if kind == "local_disk" else "NOETL_SPOOL_BUCKET"
            raise ConfigError(
                f"the {kind} spool needs {variable} (or spool.path / spool.bucket)", code="config_missing"
            )
        return kind, where

    def _open_backend(self, kind: str, where: str) -> SpoolBackend:
        backend: Any
        if kind == "gcs":
            from noetl_cloud.spool.gcs import GcsSpool

            backend = GcsSpool.from_settings(self.settings, where)
        elif kind == "s3":
            from noetl_cloud.spool.s3 import S3Spool

            backend = S3Spool.from_settings(self.settings, where)
        else:
            from noetl_cloud.spool.local_disk import LocalDiskSpool

            backend = LocalDiskSpool(where)
        return backend  # type: ignore[no-any-return]

    def _get(self, kind: str, where: str) -> tuple[SpoolBackend, str]:
        with self._lock:
            backend = self._open.get((kind, where))
            if backend is None:
                backend = self._open[(kind, where)] = self._open_backend(kind, where)
        scheme = "local_disk://" if kind == "local_disk" else f"{kind}://"
        return backend, scheme + where

    def resolve(self, spool: Spool) -> tuple[SpoolBackend, str]:
        return self._get(*self.location(spool))

    def default(self) -> tuple[SpoolBackend, str] | None:
        s = self.settings
        if s.spool_backend is None and not s.spool_bucket and not s.spool_dir:
            return None
        kind = s.spool_backend or ("gcs" if s.spool_bucket else "local_disk")
        where = s.spool_dir if kind == "local_disk" else s.spool_bucket
        if not where:
            return None
        return self._get(kind, where)
