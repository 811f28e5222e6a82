"""The key-value contract on the JSON-file adapter (``noetl-cloud subscribe``'s state), and what the file
adds: the state survives a new store on the same file (a restarted command), and two stores on one
file see each other's writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_cloud.kv.file import FileKeyValueStore
from noetl_cloud.kv.port import VersionConflict
from tests.contracts.kv import FakeClock, KeyValueContract


class TestFileKeyValueStore(KeyValueContract):
    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, clock: FakeClock, tmp_path: Path) -> FileKeyValueStore:
        return FileKeyValueStore(tmp_path / "kv.json", clock=clock)


def test_the_state_survives_a_new_store_on_the_same_file(tmp_path: Path) -> None:
    first = FileKeyValueStore(tmp_path / "state" / "kv.json")
    written = first.create("circuit/execute:x", {"state": "open"})
    assert written is not None
    again = FileKeyValueStore(tmp_path / "state" / "kv.json")
    entry = again.get("circuit/execute:x")
    assert entry is not None and entry.value == {"state": "open"} and entry.version == written.version
    again.compare_and_set("circuit/execute:x", {"state": "closed"}, expected_version=written.version)
    with pytest.raises(VersionConflict):
        first.compare_and_set("circuit/execute:x", {"state": "open"}, expected_version=written.version)


def test_a_file_that_is_not_json_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "kv.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"kv\.json"):
        FileKeyValueStore(path).get("a")
