"""The local stack's PostgreSQL: PostgreSQL 15 from the installed server binaries, in a throwaway
cluster (``fsync=off``: a process crash loses nothing, only an OS crash could) on a fixed non-default
port. PostgreSQL refuses to run as root; as root the launcher runs it as the ``postgres`` system user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from noetl_cloud.local import process
from noetl_cloud.local.components import Component, StackError

DB_USER = "noetl"
DB_PASSWORD = "noetl"  # noqa: S105 - a throwaway cluster on loopback; never a deployed credential
DB_NAME = "noetl"


def pg_bindir() -> Path:
    override = os.environ.get("NOETL_LOCAL_PG_BINDIR")
    if override:
        return Path(override)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_pg_version, reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, os.path.realpath(found))
    if not candidates:
        raise StackError(
            "PostgreSQL server binaries were not found (no initdb on PATH or in "
            "/usr/lib/postgresql/*/bin): install postgresql-15 (see docs/local.md)"
        )
    return Path(candidates[0]).parent


def _pg_version(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except (ValueError, IndexError):
        return 0


class Postgres:
    """A throwaway PostgreSQL cluster managed with initdb / pg_ctl."""

    def __init__(self, state_dir: Path, port: int) -> None:
        self.port = port
        self.bindir = pg_bindir()
        self.user = _pg_os_user()
        self.data_dir = _pg_data_dir(state_dir, self.user)
        # Beside the data: the postgres user writes it, and can reach that folder.
        self.log_path = self.data_dir.parent / "postgres.log"

    def component(self) -> Component:
        url = f"postgresql://{DB_USER}:{DB_PASSWORD}@127.0.0.1:{self.port}/{DB_NAME}"
        return Component(
            name="postgres",
            port=self.port,
            marker=f"port={self.port}",
            start=self.start,
            healthy=self.healthy,
            stop=lambda _pid: self.stop(),
            env={"NOETL_DATABASE_URL": url},
            log_path=self.log_path,
        )

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.user is not None:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            list(argv), capture_output=True, text=True, check=check, cwd="/", **kwargs
        )

    def start(self) -> int:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._own(self.log_path, touch=True)
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c fsync=off -c max_connections=200 -c shared_buffers=256MB"
        )
        result = self._run(
            str(self.bindir / "pg_ctl"),
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_path),
            "-o",
            options,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(
                f"postgres did not start: {result.stderr.strip() or result.stdout.strip()}\n"
                f"{process.tail(self.log_path)}"
            )
        self._create_database()
        return self.pid() or 0

    def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._own(self.data_dir)
        pwfile = self.data_dir.parent / "pg.pw"
        pwfile.write_text(DB_PASSWORD + "\n")
        self._own(pwfile)
        try:
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                DB_USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
        except subprocess.CalledProcessError as exc:
            raise StackError(f"initdb failed: {exc.stderr.strip()}") from exc
        finally:
            pwfile.unlink(missing_ok=True)

    def _own(self, path: Path, touch: bool = False) -> None:
        if touch:
            path.touch(exist_ok=True)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def _create_database(self) -> None:
        create_database(DB_NAME, user=DB_USER, password=DB_PASSWORD, host="127.0.0.1", port=self.port)

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def healthy(self) -> bool:
        if not process.port_open(self.port):
            return False
        import pg8000.dbapi

        try:
            conn = pg8000.dbapi.connect(
                user=DB_USER,
                password=DB_PASSWORD,
                host="127.0.0.1",
                port=self.port,
                database="postgres",
                timeout=3,
            )
        except Exception:  # noqa: BLE001 - any failure to connect means "not healthy"
            return False
        conn.close()
        return True

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", check=False)


def _pg_os_user() -> pwd.struct_passwd | None:
    """PostgreSQL will not run as root: as root, run it as the ``postgres`` user (created if absent)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("NOETL_LOCAL_PG_OS_USER", "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def _pg_data_dir(state_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """The cluster lives in the state folder when the postgres user can reach it, else under
    /var/tmp (a root-only parent such as /root would lock it out)."""
    preferred = state_dir / "postgres" / "data"
    if user is None or _traversable(state_dir):
        return preferred
    import hashlib

    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    fallback = Path("/var/tmp/noetl-cloud") / digest / "data"
    fallback.parent.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(fallback.parent.parent, 0o755)  # noqa: S103 - the postgres user must traverse it
    fallback.parent.mkdir(parents=True, exist_ok=True)
    os.chown(fallback.parent, user.pw_uid, user.pw_gid)
    return fallback


def _traversable(path: Path) -> bool:
    """True when every ancestor of ``path`` lets other users in (mode o+x)."""
    for parent in [path.resolve(), *path.resolve().parents]:
        if parent.exists() and not os.stat(parent).st_mode & 0o001:
            return False
    return True


def create_database(name: str, *, user: str, password: str | None, host: str, port: int) -> None:
    """Create database ``name`` on that server unless it exists (connected to ``postgres``)."""
    import pg8000.dbapi

    conn = pg8000.dbapi.connect(user=user, password=password, host=host, port=port, database="postgres")
    try:
        conn.autocommit = True
        cursor = conn.cursor()
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
