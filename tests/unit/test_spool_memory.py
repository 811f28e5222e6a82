from __future__ import annotations

import pytest

from noetl_cloud.spool import SpoolBackend
from noetl_cloud.spool.memory import InMemorySpool
from tests.contracts.spool import SpoolBackendContract


class TestInMemorySpool(SpoolBackendContract):
    @pytest.fixture
    def backend(self) -> InMemorySpool:
        return InMemorySpool()

    def write_raw(self, backend: SpoolBackend, name: str, data: bytes) -> None:
        assert isinstance(backend, InMemorySpool)
        version, _old = backend._objects[name]
        backend._objects[name] = (version, data)
