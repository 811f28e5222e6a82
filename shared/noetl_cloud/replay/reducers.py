"""The reducers: pure functions folding an execution's events, in canonical order, into its surfaces.

Canonical order is the event store's ``position`` (commit order within a stream; the order replay
cuts at). Every reducer takes the state and one event (upcast already) and changes the state;
none reads a clock, a database or anything but its arguments, so a fold of the same events always
gives the same state and checksum — in the projector, in ``GET /api/replay/state`` and in tests.

Surfaces and the events that shape them (the reducers of each in the module named):

* ``execution`` — one row: ``playbook.started|completed|failed``, ``execution.cancelled``, each
  step's last result (``step.done``, ``loop.done``, ``step.failed``), token counters
  (:mod:`~noetl_cloud.replay.reducers_execution`);
* ``stages`` — one row per step run (``step.started`` → ``step.done|loop.done|step.failed``,
  :mod:`~noetl_cloud.replay.reducers_execution`) and per frame stage (``stage.opened`` →
  ``stage.closed``, spec §5.1, :mod:`~noetl_cloud.replay.reducers_frames`);
* ``frames`` — ``frame.created|dispatched|claimed|started|heartbeat|committed|failed|abandoned``
  (:mod:`~noetl_cloud.replay.reducers_frames`);
* ``commands`` — ``command.issued|claimed|started|completed|failed``, the task events of a run
  (:mod:`~noetl_cloud.replay.reducers_commands`);
* ``loops`` — one row per loop run: iterations issued, completed, failed, in flight, its end
  (:mod:`~noetl_cloud.replay.reducers_commands`, the end :mod:`~noetl_cloud.replay.reducers_execution`);
* ``business_objects`` — any event whose payload or meta carries
  ``business_object: {type, id, op?: upsert|delete, state?: {...}}``: the object's merged state
  (:mod:`~noetl_cloud.replay.reducers_lineage`, with the payload references).

This module is their face: the fold, the registry of reducers by event type and what an event touches.
Changing what a reducer writes changes checksums: bump :data:`REDUCER_VERSION` (snapshots and
projections of another version are then refolded) and re-pin ``tests/data/replay/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from noetl_cloud.replay.reducers_commands import command_ended, command_issued, command_progress, task_event
from noetl_cloud.replay.reducers_execution import (
    ended,
    next_selected,
    playbook_started,
    step_denied,
    step_ended,
    step_started,
)
from noetl_cloud.replay.reducers_frames import frame_event, stage_closed, stage_opened
from noetl_cloud.replay.reducers_lineage import business_object, lineage
from noetl_cloud.replay.state import LINEAGE, Reducer, ReplayState
from noetl_cloud.replay.upcasters import Event, UpcasterRegistry

REDUCER_VERSION = 1


def fold(
    events: Iterable[Event],
    registry: UpcasterRegistry,
    state: ReplayState | None = None,
    *,
    snapshot_every: int = 0,
    on_snapshot: Callable[[ReplayState], None] | None = None,
) -> ReplayState:
    """Fold ``events`` (in canonical order) onto ``state`` (a new one when None).

    With ``snapshot_every`` > 0, ``on_snapshot`` sees the state each time its event count reaches a
    multiple of it (it must copy what it keeps: the state goes on changing).
    """
    state = state if state is not None else ReplayState()
    upcast = registry.upcast
    for raw in events:
        apply(state, upcast(raw))
        if snapshot_every > 0 and on_snapshot is not None and state.event_count % snapshot_every == 0:
            on_snapshot(state)
    return state


def apply(state: ReplayState, event: Event) -> None:
    """Fold one event."""
    reducer = _REDUCERS.get(event["event_type"])
    if reducer is not None:
        reducer(state, event)
    payload = event.get("payload") or {}
    meta = event.get("meta") or {}
    lineage(state, event, payload)
    business = payload.get("business_object") or meta.get("business_object")
    if isinstance(business, dict):
        business_object(state, event, business)
    state.event_count += 1
    state.last_event_id = str(event["event_id"])
    state.last_position = int(event["position"])


# -- which surfaces an event can change (the projector loads and writes only those) ---------------

_STEP_ENDED = ("execution", "stages", "loops")
_COMMAND_ENDED = ("commands", "loops")
_TOUCHES: dict[str, tuple[str, ...]] = {
    "playbook.started": ("execution",),
    "playbook.completed": ("execution",),
    "playbook.failed": ("execution",),
    "execution.cancelled": ("execution",),
    "step.started": ("execution", "stages"),
    "step.denied": ("execution",),
    "step.done": _STEP_ENDED,
    "loop.done": _STEP_ENDED,
    "step.failed": _STEP_ENDED,
    "next.selected": ("execution",),
    "stage.opened": ("stages",),
    "stage.closed": ("stages",),
    "command.issued": _COMMAND_ENDED,
    "command.claimed": ("commands",),
    "command.started": ("commands",),
    "command.completed": _COMMAND_ENDED,
    "command.failed": _COMMAND_ENDED,
    "task.started": ("commands",),
    "task.done": ("commands",),
    "ctx.patched": ("commands",),
    **{f"frame.{kind}": ("frames",) for kind in ("created", "dispatched", "claimed", "started", "heartbeat")},
    **{f"frame.{kind}": ("frames",) for kind in ("committed", "failed", "abandoned")},
}


def touches(event: Event) -> set[str]:
    """The surfaces (and ``payload_refs``, the lineage) folding ``event`` (upcast already) may change.
    Every reducer writes only within these; ``tests/unit/test_projector_touches.py`` holds them to it."""
    kinds = set(_TOUCHES.get(event["event_type"], ()))
    payload = event.get("payload") or {}
    meta = event.get("meta") or {}
    ref, inline = event.get("payload_ref"), payload.get("reference")
    if (isinstance(ref, dict) and ref.get("uri")) or (isinstance(inline, dict) and inline.get("ref")):
        kinds.add(LINEAGE)
    if isinstance(payload.get("business_object") or meta.get("business_object"), dict):
        kinds.add("business_objects")
    return kinds


_REDUCERS: dict[str, Reducer] = {
    "playbook.started": playbook_started,
    "playbook.completed": ended("completed"),
    "playbook.failed": ended("failed"),
    "execution.cancelled": ended("cancelled"),
    "step.started": step_started,
    "step.denied": step_denied,
    "step.done": step_ended,
    "loop.done": step_ended,
    "step.failed": step_ended,
    "next.selected": next_selected,
    "stage.opened": stage_opened,
    "stage.closed": stage_closed,
    "command.issued": command_issued,
    "command.claimed": command_progress("claimed"),
    "command.started": command_progress("started"),
    "command.completed": command_ended("completed"),
    "command.failed": command_ended("failed"),
    "task.started": task_event,
    "task.done": task_event,
    "ctx.patched": task_event,
    **{
        f"frame.{kind}": frame_event
        for kind in ("created", "dispatched", "claimed", "started", "heartbeat", "committed", "failed", "abandoned")
    },
}
