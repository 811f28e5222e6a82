"""The replay state of one execution, its canonical form and its checksums.

The state is six projection surfaces (spec §7.4 and the replay projections), each a set of rows
keyed by ``id``, plus the payload references the events carried (lineage for
``resolve_payloads``). Its canonical form lists each surface's rows sorted by ``id``; a surface's
checksum is the sha256 of that list's canonical JSON, and the overall checksum is the sha256 of
the canonical JSON of ``{surface: checksum}``. The live projector and the replay API compute them
with the same code, so equal checksums mean equal state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from noetl_cloud.envelope import checksum
from noetl_cloud.replay.upcasters import Event

SURFACES = ("execution", "stages", "frames", "commands", "loops", "business_objects")
#: The projection row kind that keeps the payload-reference lineage next to the surfaces.
LINEAGE = "payload_refs"
#: What the answers name as the checksum algorithm.
CHECKSUM_ALGORITHM = "sha256"

Row = dict[str, Any]


class ReplayState:
    """The folded state of one execution after ``event_count`` events (the last at ``last_position``)."""

    __slots__ = ("event_count", "last_event_id", "last_position", "payload_refs", "surfaces")

    def __init__(self) -> None:
        self.surfaces: dict[str, dict[str, Row]] = {name: {} for name in SURFACES}
        self.payload_refs: dict[str, Row] = {}
        self.event_count = 0
        self.last_event_id: str | None = None
        self.last_position = 0

    # -- canonical form ---------------------------------------------------------------------------

    def rows(self, surface: str) -> list[Row]:
        """A surface's rows sorted by id: the form its checksum is taken over (read as the stored form
        is, not handed out to a fold: :class:`~noetl_cloud.replay.pages.PagedRows`)."""
        table = self.surfaces[surface]
        return [dict.__getitem__(table, key) for key in sorted(table)]

    def lineage(self) -> list[Row]:
        return [dict.__getitem__(self.payload_refs, key) for key in sorted(self.payload_refs)]

    def to_dict(self) -> dict[str, Any]:
        """Everything a snapshot or a projection needs to resume folding."""
        return {
            "surfaces": {name: self.rows(name) for name in SURFACES},
            "payload_refs": self.lineage(),
            "event_count": self.event_count,
            "last_event_id": self.last_event_id,
            "last_position": self.last_position,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayState:
        state = cls()
        surfaces = data.get("surfaces") or {}
        for name in SURFACES:
            state.surfaces[name] = {str(row["id"]): row for row in surfaces.get(name) or []}
        state.payload_refs = {str(row["uri"]): row for row in data.get("payload_refs") or []}
        state.event_count = int(data.get("event_count") or 0)
        last = data.get("last_event_id")
        state.last_event_id = None if last is None else str(last)
        state.last_position = int(data.get("last_position") or 0)
        return state

    @classmethod
    def from_parts(
        cls,
        surfaces: Mapping[str, Iterable[Row]],
        payload_refs: Iterable[Row],
        *,
        event_count: int,
        last_event_id: str | None,
        last_position: int,
    ) -> ReplayState:
        return cls.from_dict(
            {
                "surfaces": {name: list(rows) for name, rows in surfaces.items()},
                "payload_refs": list(payload_refs),
                "event_count": event_count,
                "last_event_id": last_event_id,
                "last_position": last_position,
            }
        )

    # -- checksums --------------------------------------------------------------------------------

    def surface_checksums(self, surfaces: Iterable[str] = SURFACES) -> dict[str, str]:
        return {name: surface_checksum(self.rows(name)) for name in surfaces}

    def checksum(self, surfaces: Iterable[str] = SURFACES) -> str:
        return overall_checksum(self.surface_checksums(surfaces))


#: A reducer folds one event (upcast already) into the state and reads nothing else
#: (:mod:`noetl_cloud.replay.reducers` holds them by event type).
Reducer = Callable[[ReplayState, Event], None]


def surface_checksum(rows: list[Row]) -> str:
    """sha256 of the canonical JSON of a surface's rows (sorted by id)."""
    return checksum(rows)


def overall_checksum(surface_checksums: Mapping[str, str]) -> str:
    """sha256 of the canonical JSON of ``{surface: checksum}``."""
    return checksum(dict(surface_checksums))
