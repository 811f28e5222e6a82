"""The payload store in a folder (local durable store; also the worker's store without a bucket).

Create-only writes: the bytes go to a temporary file in the target's folder, which is then hard-linked
to the object's path (``os.link`` fails when the path exists: the same content is already there) and
removed. A reader never sees a partly written object.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from noetl_cloud.payload.port import ObjectPayloadStore, PayloadError, PayloadNotFound


class FilesystemPayloadStore(ObjectPayloadStore):
    def __init__(self, root: str | Path, *, tenant_id: str, organization_id: str) -> None:
        super().__init__(tenant_id=tenant_id, organization_id=organization_id)
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _upload(self, key: str, file: IO[bytes], size: int, media_type: str, metadata: Mapping[str, str]) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(file, out)
                    out.flush()
                    os.fsync(out.fileno())
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    pass  # the same content, written by someone else first
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise PayloadError(f"cannot write payload {key}: {type(exc).__name__}") from exc

    def _chunks(self, key: str, chunk_bytes: int) -> Iterator[bytes]:
        try:
            handle = self._path(key).open("rb")
        except FileNotFoundError:
            raise PayloadNotFound(f"no payload {key}") from None
        with handle:
            while chunk := handle.read(chunk_bytes):
                yield chunk

    def _delete(self, key: str) -> bool:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return False
        return True
