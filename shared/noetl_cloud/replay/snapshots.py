"""Replay-state snapshots: performance accelerators, never the authority (spec §3.2).

A snapshot records the position it covers, the event count up to it, the upcaster registry digest
and reducer version it was folded with, and the fold checksum. Replay seeds from the newest
snapshot at or before its cutoff that (a) was folded with the same registry digest and reducer
version, (b) still verifies (its state's checksum is the recorded one) and (c) still covers every
event up to its position (the caller checks the count against the log); anything else is ignored
and the fold starts earlier, or from the first event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from noetl_cloud.replay.state import ReplayState


@dataclass(frozen=True)
class Snapshot:
    tenant_id: str
    organization_id: str
    execution_id: str
    position: int
    event_count: int
    last_event_id: str | None
    registry_digest: str
    reducer_version: int
    checksum: str
    state: dict[str, Any]

    @property
    def aggregate_id(self) -> str:
        return f"execution/{self.execution_id}/all"

    def replay_state(self) -> ReplayState:
        return ReplayState.from_dict(self.state)

    def verifies(self) -> bool:
        """The stored state still folds to the recorded checksum and covers the recorded position."""
        state = self.replay_state()
        return (
            state.checksum() == self.checksum
            and state.event_count == self.event_count
            and state.last_position == self.position
        )


def capture(
    state: ReplayState,
    *,
    tenant_id: str,
    organization_id: str,
    execution_id: str,
    registry_digest: str,
    reducer_version: int,
) -> Snapshot:
    """A snapshot of ``state`` as it is now (a copy: the fold may go on)."""
    return Snapshot(
        tenant_id=tenant_id,
        organization_id=organization_id,
        execution_id=execution_id,
        position=state.last_position,
        event_count=state.event_count,
        last_event_id=state.last_event_id,
        registry_digest=registry_digest,
        reducer_version=reducer_version,
        checksum=state.checksum(),
        state=_copy(state.to_dict()),
    )


def _copy(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


def choose(
    candidates: Iterable[Snapshot], *, cutoff_position: int, registry_digest: str, reducer_version: int
) -> Snapshot | None:
    """The newest compatible, verifying snapshot at or before ``cutoff_position``."""
    usable = [
        s
        for s in candidates
        if s.position <= cutoff_position
        and s.registry_digest == registry_digest
        and s.reducer_version == reducer_version
    ]
    for snapshot in sorted(usable, key=lambda s: s.position, reverse=True):
        if snapshot.verifies():
            return snapshot
    return None
