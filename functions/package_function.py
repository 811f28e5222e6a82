"""Write the source archive of one HTTP role as a 2nd-gen Cloud Function (docs/deploy.md, "Cloud Functions").

    python functions/package_function.py <role> <archive.zip>

The archive is what Cloud Functions builds: ``main.py`` (the role's own ``functions/<role>/main.py``,
whose function named after the role is the entry point), ``requirements.txt`` (the image's lock,
``functions/requirements.lock``: the same pinned, hashed dependencies) and the ``noetl_cloud`` package
from ``shared/``, which the function imports from its source folder. The same source as the image,
then, and the same bytes for the same commit (entries sorted, fixed timestamps). Cloud Build uploads
one archive per role to ``gs://<build source bucket>/functions/<role>.zip`` (cloudbuild.yaml); the
subscription runtime is not an HTTP function and has none. Not part of any role.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The roles served over HTTP (the subscription runtime is a pull loop: Cloud Run only).
HTTP_ROLES = ("execute", "ingress", "worker", "projector", "frames", "spool_drainer")
_EPOCH = (1980, 1, 1, 0, 0, 0)


def members(role: str, root: Path = ROOT) -> list[tuple[str, Path]]:
    """(name in the archive, file) of every member, sorted by name."""
    if role not in HTTP_ROLES:
        raise ValueError(f"{role!r} is not an HTTP role ({', '.join(HTTP_ROLES)})")
    package = root / "shared" / "noetl_cloud"
    files = [
        (f"noetl_cloud/{path.relative_to(package).as_posix()}", path)
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    ]
    files += [
        ("main.py", root / "functions" / role / "main.py"),
        ("requirements.txt", root / "functions" / "requirements.lock"),
    ]
    return sorted(files)


def write(role: str, archive: Path, root: Path = ROOT) -> int:
    """Write the archive of ``role``; how many files it holds."""
    entries = members(role, root)
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, path in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(info, path.read_bytes())
    return len(entries)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 64
    try:
        count = write(argv[0], Path(argv[1]))
    except ValueError as exc:
        print(f"package_function: {exc}", file=sys.stderr)
        return 64
    print(f"{argv[1]}: {count} files ({argv[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
