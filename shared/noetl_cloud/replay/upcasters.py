"""The upcaster registry: pure functions that lift an old event schema to a newer one.

An upcaster is keyed by ``(schema_name, from_version)`` and must return the event at a *higher*
``schema_version`` of the same ``schema_name`` (spec §3.2 step 4): it cannot rewrite an event
without moving its version forward, so an upcast chain always ends. Upcasters are applied before
a reducer sees an event, in replay and in the projector alike.

The registry's digest is the sha256 of the canonical JSON of its sorted transitions (schema name,
from version, the function's qualified name): two processes with the same registrations have the
same digest, and a snapshot or projection folded with another registry is never reused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from noetl_cloud.envelope import checksum
from noetl_cloud.errors import NoetlError

Event = dict[str, Any]
Upcaster = Callable[[Event], Event]


class UpcasterError(NoetlError):
    """An upcaster broke its contract (same schema, a higher version)."""

    status = 500
    code = "upcaster_invalid"


class UpcasterRegistry:
    """Upcasters by ``(schema_name, from_version)``; :meth:`upcast` applies them until none applies."""

    def __init__(self) -> None:
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        self._digest: str | None = None

    def register(self, schema_name: str, from_version: int, upcaster: Upcaster) -> None:
        """Register one transition; a second registration of the same key is refused."""
        key = (schema_name, from_version)
        if key in self._upcasters:
            raise ValueError(f"an upcaster for {schema_name} v{from_version} is already registered")
        if from_version < 1:
            raise ValueError("schema versions start at 1")
        self._upcasters[key] = upcaster
        self._digest = None

    def transitions(self) -> list[dict[str, Any]]:
        """The registered transitions, sorted: what the digest is taken over."""
        return [
            {"schema_name": name, "from_version": version, "upcaster": f"{fn.__module__}.{fn.__qualname__}"}
            for (name, version), fn in sorted(self._upcasters.items())
        ]

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = checksum(self.transitions())
        return self._digest

    def upcast(self, event: Event) -> Event:
        """``event`` at the newest schema version the registry knows (a new dict when it changed)."""
        if not self._upcasters:
            return event
        while True:
            name, version = event["schema_name"], int(event["schema_version"])
            upcaster = self._upcasters.get((name, version))
            if upcaster is None:
                return event
            lifted = upcaster(copy.deepcopy(event))  # pure: the caller's event is never touched
            if not isinstance(lifted, dict) or lifted.get("schema_name") != name:
                raise UpcasterError(f"the upcaster of {name} v{version} must return an event of the same schema")
            if int(lifted.get("schema_version", 0)) <= version:
                raise UpcasterError(f"the upcaster of {name} v{version} must advance the schema version")
            event = lifted


def default_registry() -> UpcasterRegistry:
    """The registry every role folds with. Every event schema is at version 1 today, so it is empty;
    a schema change registers its upcaster here (and so changes the digest)."""
    return UpcasterRegistry()
