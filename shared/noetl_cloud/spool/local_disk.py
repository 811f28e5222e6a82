"""Local-disk spool backend: a directory, for the CLI mode (RFC §8.2 ``local_disk``).

An object ``a/b/c`` is the file ``<root>/a/b/c`` (name segments are percent-encoded, so none is
``.``/``..`` or contains a separator). Every write goes to a temporary file in the target's
directory, created with ``O_CREAT | O_EXCL``, written and fsynced, then

* create-only: hard-linked to the target name (``link`` fails when the name exists, so a
  create never overwrites and a reader never sees a partial file), then the temporary unlinked;
* rewrite: renamed over the target (``os.replace``, atomic).

The directory is fsynced after each link, rename and unlink. Temporary files start with
``.tmp-`` and are ignored by listings; a crash may leave one behind (harmless).

A file's version is ``<inode>-<mtime_ns>``: every write makes a new file, so it changes with
every write. Conditional rewrites and deletes compare it under a lock held by this instance:
that is atomic for one process (the CLI runtime); two processes sharing a directory could race
between the compare and the rename/unlink. Create-only writes are atomic across processes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from noetl_cloud.errors import Unavailable
from noetl_cloud.spool.item import SpoolError, SpoolItemExists, SpoolItemNotFound, SpoolRef, SpoolVersionConflict
from noetl_cloud.spool.port import ObjectSpool

_TMP = ".tmp-"


def _version(stat: os.stat_result) -> str:
    return f"{stat.st_ino}-{stat.st_mtime_ns}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDiskSpool(ObjectSpool):
    """The spool port on a local directory (created on first write)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        parts = name.split("/")
        if not name or any(part in ("", ".", "..") or part.startswith(_TMP) for part in parts):
            raise ValueError(f"{name!r} is not a spool object name")
        return self.root.joinpath(*parts)

    def _write_temp(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.parent / f"{_TMP}{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return temp

    def _synced(self, directory: Path) -> None:
        if self.fsync:
            _fsync_dir(directory)

    def _ref(self, name: str, path: Path) -> SpoolRef:
        stat = path.stat()
        return SpoolRef(name=name, version=_version(stat), size=stat.st_size)

    def _create(self, name: str, data: bytes) -> SpoolRef:
        target = self._path(name)
        with _translated(name):
            temp = self._write_temp(target, data)
            try:
                os.link(temp, target)
            except FileExistsError:
                raise SpoolItemExists(name) from None
            finally:
                temp.unlink(missing_ok=True)
            self._synced(target.parent)
            return self._ref(name, target)

    def _replace(self, ref: SpoolRef, data: bytes) -> SpoolRef:
        target = self._path(ref.name)
        with _translated(ref.name), self._lock:
            self._check(ref, target)
            temp = self._write_temp(target, data)
            try:
                os.replace(temp, target)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            self._synced(target.parent)
            return self._ref(ref.name, target)

    def _check(self, ref: SpoolRef, target: Path) -> None:
        try:
            actual = _version(target.stat())
        except FileNotFoundError:
            raise SpoolItemNotFound(ref.name) from None
        if ref.version is not None and actual != ref.version:
            raise SpoolVersionConflict(ref.name, ref.version, actual)

    def _read(self, name: str) -> tuple[SpoolRef, bytes]:
        target = self._path(name)
        with _translated(name):
            try:
                with target.open("rb") as file:
                    stat = os.fstat(file.fileno())
                    data = file.read()
            except (FileNotFoundError, NotADirectoryError):
                raise SpoolItemNotFound(name) from None
            return SpoolRef(name=name, version=_version(stat), size=stat.st_size), data

    def _list(self, prefix: str, limit: int | None) -> list[SpoolRef]:
        directory = prefix.rpartition("/")[0]
        base = self.root.joinpath(*directory.split("/")) if directory else self.root
        found: list[SpoolRef] = []
        with _translated(prefix):
            for path in self._walk(base):
                name = path.relative_to(self.root).as_posix()
                if not name.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                    found.append(self._ref(name, path))
                    if limit is not None and len(found) >= limit:
                        break
        return found

    def _walk(self, directory: Path) -> list[Path]:
        """Files below ``directory``, in name order (of the relative name, as object stores list)."""
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        files: list[Path] = []
        for entry in entries:
            if entry.name.startswith(_TMP):
                continue
            if entry.is_dir(follow_symlinks=False):
                files += self._walk(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                files.append(Path(entry.path))
        return sorted(files, key=lambda p: p.relative_to(self.root).as_posix())

    def _children(self, prefix: str) -> list[str]:
        base = self.root.joinpath(*prefix.rstrip("/").split("/"))
        with _translated(prefix):
            try:
                entries = list(os.scandir(base))
            except (FileNotFoundError, NotADirectoryError):
                return []
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and self._walk(Path(e.path)))

    def _delete(self, ref: SpoolRef) -> bool:
        target = self._path(ref.name)
        with _translated(ref.name), self._lock:
            try:
                self._check(ref, target)
                target.unlink()
            except (SpoolItemNotFound, FileNotFoundError):
                return False
            self._synced(target.parent)
            return True


@contextlib.contextmanager
def _translated(name: str) -> Iterator[None]:
    """OS errors as ours: a full or unreachable disk is retryable, anything else is not."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN, errno.EBUSY):
            raise Unavailable(
                f"spool directory unavailable: {errno.errorcode.get(exc.errno or 0, 'error')}", code="spool_unavailable"
            ) from exc
        raise SpoolError(f"spool directory refused an operation on {name!r}: {type(exc).__name__}") from exc
