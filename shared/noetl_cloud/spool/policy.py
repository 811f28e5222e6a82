"""The spool's decisions (subscription-listener RFC §8.2-§8.3), as pure functions.

Everything here takes data and returns data: no storage, no clock, no events. The spool engine
reads the state it needs (the circuit, the spool's size, the items of a lane), asks one of these
functions what to do, and does it.

* :func:`on_downstream_failure` -- stop acking or spool while the downstream is down (§8.2 modes);
* :func:`lane_of` -- the ordering lane of a message (§8.3 ordering);
* :func:`retention_decision` / :func:`expired` -- admission under ``max_bytes``, expiry after
  ``max_age_hours`` (§8.3 retention);
* :func:`drain_order` / :func:`is_poison` -- the replay plan and poison messages (§8.3 drain);
* :func:`may_interleave` -- whether live traffic may run beside the drain.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Generic, Literal, Protocol, TypeVar

from noetl_cloud.spec.spool import Retention

SpoolMode = Literal["off", "buffer_and_ack", "hybrid"]
Ordering = Literal["global", "per_key", "none"]
OnRecovery = Literal["ordered_then_live", "interleave"]
OnFull = Literal["stop_acking", "drop_to_dlq", "alert_only"]
SourceKind = Literal["pull", "push"]
FailureAction = Literal["spool", "stop_acking"]

GLOBAL_LANE: Final = "_global"
NOKEY_LANE: Final = "_nokey"
ANY_LANE: Final = "_any"
# Lanes made from key values start with one of these, never with ``_``: a key value cannot
# collide with the fixed lanes above.
_READABLE_PREFIX: Final = "k-"
_ENCODED_PREFIX: Final = "b-"
_HASHED_PREFIX: Final = "h-"
MAX_LANE_CHARS: Final = 100
_READABLE = re.compile(r"^[A-Za-z0-9_-]+$")

RETENTION_EXPIRED: Final = "retention_expired"
POISON: Final = "max_replay_attempts"
SPOOL_ALERT_EVENT: Final = "subscription.spool.alert"


# -- modes (§8.2) --------------------------------------------------------------------------------


def source_kind(source: str, delivery: Literal["pull", "push"]) -> SourceKind:
    """``push`` for a source that cannot redeliver reliably (a webhook, a Pub/Sub push route), else ``pull``."""
    return "push" if source == "webhook" or delivery == "push" else "pull"


def on_downstream_failure(
    mode: SpoolMode,
    source_kind: SourceKind,
    failing_since: datetime | None,
    now: datetime,
    hybrid_escalate_after_ms: int,
) -> FailureAction:
    """What to do with a message while its downstream is down.

    * ``off``: ``stop_acking`` whatever the source -- a pull source redelivers later, a push
      source is answered 503 (the source owns durability).
    * ``buffer_and_ack``: ``spool`` (write to the spool, then ack).
    * ``hybrid``: ``stop_acking`` while the outage is younger than ``hybrid_escalate_after_ms``
      (short blips are absorbed by the source), ``spool`` from then on. ``failing_since`` is when
      the outage began (the circuit's first opening); ``None`` (unknown) counts as just now.
    * A ``push`` source always spools when the mode is not ``off``: it cannot be relied on to
      redeliver, so stop-acking would lose the message.
    """
    if mode == "off":
        return "stop_acking"
    if mode == "buffer_and_ack" or source_kind == "push":
        return "spool"
    if failing_since is None:
        return "stop_acking" if hybrid_escalate_after_ms > 0 else "spool"
    outage = now - failing_since
    return "spool" if outage >= timedelta(milliseconds=hybrid_escalate_after_ms) else "stop_acking"


# -- lanes (§8.3 ordering) -----------------------------------------------------------------------


def lane_of(ordering: Ordering, ordering_key_value: object) -> str:
    """The lane a message is spooled in and drained from.

    * ``global``: ``"_global"`` (one lane, strict receive order);
    * ``none``: ``"_any"`` (one lane, drained in any order);
    * ``per_key``: one lane per key value; a missing key (``None`` or ``""``) is ``"_nokey"``.
      The lane is safe as a file name and an object-name segment (only ``A-Z a-z 0-9 _ -``),
      never starts with ``_`` (so it cannot meet a fixed lane), is at most
      :data:`MAX_LANE_CHARS` long, and is the same for the same value on every instance:
      ``k-<value>`` for a short value of safe characters, ``b-<base64url of the UTF-8>`` for
      other short values, ``h-<sha256 hex, 40 digits>`` for long ones. A non-string value
      (a Kafka partition number) is taken as its compact JSON text, so ``7`` and ``"7"`` share a
      lane -- merged lanes only cost parallelism, never order.
    """
    if ordering == "global":
        return GLOBAL_LANE
    if ordering == "none":
        return ANY_LANE
    if ordering != "per_key":
        raise ValueError(f"unknown ordering {ordering!r}")
    if ordering_key_value is None or ordering_key_value == "":
        return NOKEY_LANE
    if isinstance(ordering_key_value, str):
        text = ordering_key_value
    else:
        text = json.dumps(ordering_key_value, sort_keys=True, separators=(",", ":"), default=str)
    if _READABLE.match(text) and len(_READABLE_PREFIX) + len(text) <= MAX_LANE_CHARS:
        return _READABLE_PREFIX + text
    raw = text.encode("utf-8", errors="surrogatepass")
    encoded = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(_ENCODED_PREFIX) + len(encoded) <= MAX_LANE_CHARS:
        return _ENCODED_PREFIX + encoded
    return _HASHED_PREFIX + hashlib.sha256(raw).hexdigest()[:40]


# -- retention (§8.3) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Admit:
    """Spool the item. ``sweep_due``: the oldest item is past ``max_age_hours``; expire the old ones."""

    sweep_due: bool = False

    @property
    def admits(self) -> bool:
        return True


@dataclass(frozen=True)
class Full:
    """The spool is at ``max_bytes``; ``action`` is the retention's ``on_full``.

    * ``stop_acking``: refuse the item -- a pull source keeps it (no ack), a push source is
      answered 503;
    * ``drop_to_dlq``: write it straight under the dead-letter prefix (reason ``spool_full``);
    * ``alert_only``: spool it anyway and emit :data:`SPOOL_ALERT_EVENT`.
    """

    action: OnFull
    count: int
    bytes_used: int
    item_bytes: int
    max_bytes: int
    sweep_due: bool = False

    @property
    def admits(self) -> bool:
        """Whether the item is spooled all the same (only under ``alert_only``)."""
        return self.action == "alert_only"

    @property
    def event(self) -> str | None:
        """The event to emit, if any."""
        return SPOOL_ALERT_EVENT if self.action == "alert_only" else None


def expired(spooled_at: datetime, now: datetime, max_age_hours: int) -> bool:
    """Whether an item is older than ``max_age_hours``: it then leaves the spool as
    ``subscription.message.dead_lettered`` with reason :data:`RETENTION_EXPIRED`."""
    return now - spooled_at >= timedelta(hours=max_age_hours)


def retention_decision(
    count: int,
    bytes_used: int,
    item_bytes: int,
    oldest_spooled_at: datetime | None,
    now: datetime,
    retention: Retention,
) -> Admit | Full:
    """Whether one more item of ``item_bytes`` may be spooled beside ``count`` items of ``bytes_used``.

    The spool is full when the item would take it past ``max_bytes`` (an item bigger than the
    whole ceiling never fits); what then happens is ``on_full`` (see :class:`Full`). Age does not
    refuse an item: an expired oldest item only sets ``sweep_due`` so the engine dead-letters the
    old items (which may free the room).
    """
    if count < 0 or bytes_used < 0 or item_bytes < 0:
        raise ValueError("count and byte sizes cannot be negative")
    sweep_due = oldest_spooled_at is not None and expired(oldest_spooled_at, now, retention.max_age_hours)
    if bytes_used + item_bytes > retention.max_bytes:
        return Full(
            action=retention.on_full,
            count=count,
            bytes_used=bytes_used,
            item_bytes=item_bytes,
            max_bytes=retention.max_bytes,
            sweep_due=sweep_due,
        )
    return Admit(sweep_due=sweep_due)


# -- drain (§8.3) --------------------------------------------------------------------------------


class Replayable(Protocol):
    """What the drain plan needs of an item (:class:`~noetl_cloud.spool.item.SpoolItem` has it)."""

    @property
    def recv_seq(self) -> int: ...

    @property
    def attempts(self) -> int: ...


ItemT = TypeVar("ItemT", bound=Replayable)


def is_poison(attempts: int, max_replay_attempts: int) -> bool:
    """An item that has failed ``max_replay_attempts`` replays is poison: dead-letter it, reason :data:`POISON`."""
    return attempts >= max_replay_attempts


@dataclass(frozen=True)
class DrainStep(Generic[ItemT]):
    """Replay ``item``, or dead-letter it (``reason`` then says why). ``lane``: the lane the item is stored in."""

    action: Literal["replay", "dead_letter"]
    lane: str
    item: ItemT
    reason: str | None = None


@dataclass(frozen=True)
class LanePlan(Generic[ItemT]):
    """One lane's steps in order. ``halted``: the lane stops after its last step (a poison under ``global``)."""

    lane: str
    steps: tuple[DrainStep[ItemT], ...]
    halted: bool = False


@dataclass(frozen=True)
class DrainPlan(Generic[ItemT]):
    """What a drain does, lane by lane.

    ``sequential`` (``global``): one replay at a time, in the order of the single lane. Otherwise
    lanes are independent and may be drained concurrently; :meth:`interleaved` gives one fair
    serial order (round robin across lanes, each lane's own order kept).
    """

    ordering: Ordering
    lanes: tuple[LanePlan[ItemT], ...] = field(default_factory=tuple)

    @property
    def sequential(self) -> bool:
        return self.ordering == "global"

    @property
    def halted_lanes(self) -> tuple[str, ...]:
        return tuple(plan.lane for plan in self.lanes if plan.halted)

    def interleaved(self) -> Iterator[DrainStep[ItemT]]:
        """Every step: round robin across lanes, each lane in its own order."""
        depth = max((len(plan.steps) for plan in self.lanes), default=0)
        for index in range(depth):
            for plan in self.lanes:
                if index < len(plan.steps):
                    yield plan.steps[index]


def _lane_plan(
    plan_lane: str, items: Sequence[tuple[str, ItemT]], max_replay_attempts: int, *, stop_on_poison: bool
) -> LanePlan[ItemT]:
    steps: list[DrainStep[ItemT]] = []
    for lane, item in sorted(items, key=lambda pair: pair[1].recv_seq):
        if is_poison(item.attempts, max_replay_attempts):
            steps.append(DrainStep("dead_letter", lane, item, POISON))
            if stop_on_poison:
                return LanePlan(plan_lane, tuple(steps), halted=True)
        else:
            steps.append(DrainStep("replay", lane, item))
    return LanePlan(plan_lane, tuple(steps))


def drain_order(
    lanes_with_items: Mapping[str, Sequence[ItemT]], ordering: Ordering, max_replay_attempts: int
) -> DrainPlan[ItemT]:
    """The replay plan once the circuit closes; items are ordered by ``recv_seq`` within a lane.

    * ``global``: every item in one lane (lanes given are merged into the plan lane ``_global``;
      each step keeps its item's own lane), strictly in receive order, one at a time.
    * ``per_key``: each lane on its own, in receive order; lanes do not wait for each other.
    * ``none``: one lane per given lane, oldest first; order is not promised.

    A poison item (``attempts >= max_replay_attempts``, see :func:`is_poison`) is dead-lettered
    with reason :data:`POISON`. Under ``per_key`` and ``none`` the lane behind it goes on. Under
    ``global`` the lane **stops** after dead-lettering it (``halted``): replaying past it would
    leave a silent gap in a strict order, so the engine must persist the halt, alert, and wait for
    an operator to resume (accepting the gap) instead of draining on. The plan reflects attempts
    as given; an item that fails during this drain is counted by the engine and planned again.
    """
    if max_replay_attempts < 1:
        raise ValueError("max_replay_attempts must be at least 1")
    if ordering == "global":
        merged = [(lane, item) for lane, items in lanes_with_items.items() for item in items]
        if not merged:
            return DrainPlan(ordering)
        return DrainPlan(ordering, (_lane_plan(GLOBAL_LANE, merged, max_replay_attempts, stop_on_poison=True),))
    if ordering not in ("per_key", "none"):
        raise ValueError(f"unknown ordering {ordering!r}")
    plans = tuple(
        _lane_plan(lane, [(lane, item) for item in items], max_replay_attempts, stop_on_poison=False)
        for lane, items in sorted(lanes_with_items.items())
        if items
    )
    return DrainPlan(ordering, plans)


def may_interleave(on_recovery: OnRecovery, ordering: Ordering) -> bool:
    """Whether live traffic may resume while the backlog drains.

    ``ordered_then_live`` never interleaves. ``interleave`` does, except under ``global``: live
    messages would overtake the backlog and break the strict order (the catalog already rejects
    that combination; this guard keeps a stored or hand-built spec from doing it).
    """
    return on_recovery == "interleave" and ordering != "global"
