from __future__ import annotations

import os
from pathlib import Path

import pytest

from noetl_cloud.spool import SpoolBackend
from noetl_cloud.spool.local_disk import LocalDiskSpool
from tests.contracts.spool import SpoolBackendContract, make_item, new_subscription


class TestLocalDiskSpool(SpoolBackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> LocalDiskSpool:
        return LocalDiskSpool(tmp_path / "spool")

    def write_raw(self, backend: SpoolBackend, name: str, data: bytes) -> None:
        assert isinstance(backend, LocalDiskSpool)
        (backend.root / name).write_bytes(data)


def test_objects_are_plain_files_under_the_root_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    spool = LocalDiskSpool(tmp_path)
    sub = new_subscription()
    ref = spool.put(make_item(sub, 1, b"payload", lane="a/b"), b"payload")
    path = tmp_path / sub / "a%2Fb" / f"{1:020d}-m-1"
    assert path.read_bytes().endswith(b"\npayload") and path.stat().st_size == ref.size
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_temporary_files_and_stray_files_are_not_listed(tmp_path: Path) -> None:
    spool = LocalDiskSpool(tmp_path, fsync=False)
    sub = new_subscription()
    ref = spool.put(make_item(sub, 1, b"p"), b"p")
    lane_dir = tmp_path / sub / "lane-a"
    (lane_dir / ".tmp-0123").write_bytes(b"partial")
    (lane_dir / "README").write_bytes(b"not an item")
    os.makedirs(tmp_path / sub / "empty-lane")
    assert spool.list(sub) == [ref]
    assert spool.lanes(sub) == ["lane-a"]
    assert spool.usage(sub) == (1, ref.size)


def test_names_that_would_leave_the_root_are_refused(tmp_path: Path) -> None:
    spool = LocalDiskSpool(tmp_path)
    for name in ("../x", "a//b", "a/./b", "", "a/.tmp-1"):
        with pytest.raises(ValueError):
            spool._read(name)
