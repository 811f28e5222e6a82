"""Google Secret Manager: the alias is the secret id in the deployment's project; the latest
version is read and cached for a short TTL (rotation takes effect within it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from google.api_core.exceptions import NotFound as GoogleNotFound
from google.api_core.exceptions import PermissionDenied
from google.cloud import secretmanager

from noetl_cloud.secrets.port import SecretNotFound, check_alias


class SecretManagerSecrets:
    def __init__(self, project_id: str, *, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.project_id = project_id
        self.ttl_s = ttl_s
        self._clock = clock
        self._client: secretmanager.SecretManagerServiceClient | None = None
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def resolve(self, alias: str) -> str:
        check_alias(alias)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(alias)
            if hit is not None and hit[0] > now:
                return hit[1]
            if self._client is None:
                self._client = secretmanager.SecretManagerServiceClient()
            client = self._client
        name = f"projects/{self.project_id}/secrets/{alias}/versions/latest"
        try:
            value = client.access_secret_version(name=name).payload.data.decode("utf-8")
        except (GoogleNotFound, PermissionDenied):
            raise SecretNotFound(f"secret alias {alias!r} is not readable in project {self.project_id}") from None
        with self._lock:
            self._cache[alias] = (now + self.ttl_s, value)
        return value
