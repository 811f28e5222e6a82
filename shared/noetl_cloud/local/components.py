"""What a component of the local stack is: one process, how it is started, probed and stopped.

Each kind has its module: :mod:`noetl_cloud.local.postgres` (the database),
:mod:`noetl_cloud.local.emulators` (Pub/Sub, Firestore, GCS, S3), :mod:`noetl_cloud.local.roles`
(the roles and the maintenance scheduler) and :mod:`noetl_cloud.local.kafka_broker` (the optional
Kafka broker). The ports they listen on are :mod:`noetl_cloud.local.layout`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROJECT_ID = "noetl-local"


class StackError(RuntimeError):
    """The local stack could not be brought up; the message says which component and why."""


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
