"""Where the local stack lives: its state folder and its ports.

State lives in one folder (default ``local/.state`` of the checkout, found from the working directory
or from where the package is installed, so the commands work from any folder; git-ignored;
``NOETL_LOCAL_STATE_DIR`` moves it); :mod:`noetl_cloud.local.stack` says what it holds.

Every port is an offset from one base (``NOETL_LOCAL_PORT_BASE``, default :data:`DEFAULT_PORT_BASE`):
the backing services' (:class:`Ports`, started in :data:`ORDER`), the roles' (:data:`ROLE_PORTS`),
the maintenance scheduler's and the demo API's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT_BASE = 15430


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


ORDER = ("postgres", "pubsub", "firestore", "gcs", "s3")
ROLE_PORTS = {
    "execute": 10,
    "ingress": 11,
    "worker": 12,
    "projector": 13,
    "frames": 14,
    "spool_drainer": 15,
    "subscription_runtime": 16,
}
#: The demo's fixture API (``noetl-cloud demo``) listens on this offset: the one loopback port the local
#: worker's http tasks are allowed to reach (NOETL_HTTP_TOOL_ALLOW; loopback is refused by default).
DEMO_API_PORT = 20
#: The maintenance scheduler (noetl_cloud.maintenance.scheduler): started after the roles, stopped first.
SCHEDULER = "scheduler"
SCHEDULER_PORT = 17
RUNTIME = "subscription_runtime"


def _is_checkout(folder: Path) -> bool:
    return (folder / "functions").is_dir() and (folder / "local").is_dir()


def project_root(start: Path | None = None) -> Path:
    """The checkout the stack belongs to: the nearest folder at or above ``start`` (default: the working
    directory) that holds ``functions/`` and ``local/``; else the checkout this package is installed
    from (an editable install); else ``start`` itself."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if _is_checkout(folder):
            return folder
    installed = Path(__file__).resolve().parents[3]  # <checkout>/shared/noetl_cloud/local/layout.py
    return installed if _is_checkout(installed) else here


def default_state_dir(env: Mapping[str, str], start: Path | None = None) -> Path:
    """``NOETL_LOCAL_STATE_DIR``, else ``local/.state`` of :func:`project_root`."""
    if env.get("NOETL_LOCAL_STATE_DIR"):
        return Path(env["NOETL_LOCAL_STATE_DIR"]).absolute()
    return project_root(start) / "local" / ".state"
