"""What one drain of one subscription did (:meth:`~noetl_cloud.spool.drain.Drainer.drain`): how it ended,
what it replayed and dead-lettered, whether it probed; ``POST /drain`` answers with it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrainReport:
    subscription: str
    state: str = "drained"  # drained | empty | circuit_open | probing | busy | halted | budget
    replayed: int = 0
    dead_lettered: int = 0
    probed: bool = False
    lanes: list[str] = field(default_factory=list)
    drain_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    holder: str = ""
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("started", "holder")}
