"""The circuit breaker of one downstream (subscription-listener RFC §8.1), shared through the KV port.

A downstream is the resolved target a dispatch depends on (``execute:<api url>``, a bucket, a
topic). Its circuit is one document ``circuit/<downstream>`` in the coordination store, so every
instance sees the same state and it survives restarts.

**States.** ``closed``: dispatch. ``trip_after`` consecutive failures open it. ``open``: do not
dispatch -- spool or stop acking, as :func:`~noetl_cloud.spool.policy.on_downstream_failure`
says. Once ``probe_after_ms`` have passed since it opened, the next caller of ``allow`` becomes
the one probe (``half_open``): it dispatches for real (the oldest spooled item, the caller
decides). The probe's success closes the circuit; its failure re-opens it with a fresh timer. A
probe that never reports back loses its turn after ``probe_timeout_ms``: the next caller becomes
the probe, so the circuit cannot stick half-open.

**Who reports what.** Only the probe holder moves a ``half_open`` circuit, and an ``open``
circuit ignores reports (they come from dispatches started before it opened): a late success of
one of them does not close it, a late failure does not restart its timer. A success of a
``closed`` circuit resets the failure count.

**Exactly once.** Transitions are pure functions of the state (:func:`decide`,
:func:`on_success`, :func:`on_failure`); :class:`CircuitBreaker` reads the document, applies one,
and writes it back by compare-and-set, reading again after a :class:`VersionConflict`. Only the
caller whose write made a transition is told so (``opened``, ``reopened``, ``closed``) and emits
``subscription.circuit.opened`` / ``subscription.circuit.closed``; only the caller whose write
took the probe gets ``probe``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal, TypeVar

from noetl_cloud.envelope import utc_now
from noetl_cloud.errors import Unavailable
from noetl_cloud.kv.port import Clock, Entry, KeyValueStore, VersionConflict, utc
from noetl_cloud.spec.spool import Circuit
from noetl_cloud.spool.policy import SourceKind, SpoolMode, on_downstream_failure

R = TypeVar("R")
CircuitStatus = Literal["closed", "open", "half_open"]
Action = Literal["dispatch", "probe", "spool", "refuse"]

KEY_PREFIX: Final = "circuit/"
DEFAULT_PROBE_TIMEOUT_MS: Final = 60_000
DEFAULT_MAX_ATTEMPTS: Final = 64
OPENED_EVENT: Final = "subscription.circuit.opened"
CLOSED_EVENT: Final = "subscription.circuit.closed"


@dataclass(frozen=True)
class CircuitConfig:
    """When to open (``trip_after`` consecutive failures), when to probe, when a silent probe expires."""

    trip_after: int = 5
    probe_after_ms: int = 30_000
    probe_timeout_ms: int = DEFAULT_PROBE_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.trip_after < 1 or self.probe_after_ms < 0 or self.probe_timeout_ms < 1:
            raise ValueError("trip_after and probe_timeout_ms must be positive, probe_after_ms not negative")

    @classmethod
    def from_spec(cls, circuit: Circuit, *, probe_timeout_ms: int = DEFAULT_PROBE_TIMEOUT_MS) -> CircuitConfig:
        """From the ``spool.circuit`` block of a subscription."""
        return cls(circuit.trip_after, circuit.probe_after_ms, probe_timeout_ms)


@dataclass(frozen=True)
class CircuitState:
    """One circuit as stored. ``version`` is the KV entry's version (0: not stored yet).

    ``opened_at`` is when it last (re-)opened (the probe timer counts from it);
    ``outage_since`` is when this outage first opened it (kept across re-opens, for ``hybrid``).
    """

    state: CircuitStatus = "closed"
    consecutive_failures: int = 0
    opened_at: datetime | None = None
    outage_since: datetime | None = None
    probe_holder: str | None = None
    probe_started_at: datetime | None = None
    version: int = 0

    def to_value(self) -> dict[str, Any]:
        """The stored JSON object (without ``version``, which the store keeps)."""

        def iso(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return {
            "state": self.state,
            "consecutive_failures": self.consecutive_failures,
            "opened_at": iso(self.opened_at),
            "outage_since": iso(self.outage_since),
            "probe_holder": self.probe_holder,
            "probe_started_at": iso(self.probe_started_at),
        }

    @classmethod
    def from_entry(cls, entry: Entry | None) -> CircuitState:
        """The state of a stored entry; a closed circuit when there is none."""
        if entry is None:
            return cls()
        value = entry.value

        def moment(name: str) -> datetime | None:
            text = value.get(name)
            return None if text is None else datetime.fromisoformat(str(text))

        state = value.get("state", "closed")
        if state not in ("closed", "open", "half_open"):
            raise ValueError(f"stored circuit state {state!r} is not closed, open or half_open")
        return cls(
            state=state,
            consecutive_failures=int(value.get("consecutive_failures", 0)),
            opened_at=moment("opened_at"),
            outage_since=moment("outage_since"),
            probe_holder=value.get("probe_holder"),
            probe_started_at=moment("probe_started_at"),
            version=entry.version,
        )


@dataclass(frozen=True)
class Decision:
    """What ``allow`` answered. ``action``:

    * ``dispatch`` -- the circuit is closed;
    * ``probe`` -- this caller is the one probe: dispatch (the oldest spooled item) and report;
    * ``spool`` -- the circuit is open: spool the message (and ack);
    * ``refuse`` -- the circuit is open and the mode says stop acking (a push source gets 503).

    ``write`` is the new state to store (``None``: nothing changes). ``state`` is the state decided
    on (from :func:`decide`), or the state as stored afterwards (from :meth:`CircuitBreaker.allow`).
    """

    action: Action
    state: CircuitState
    write: CircuitState | None = None

    @property
    def dispatches(self) -> bool:
        return self.action in ("dispatch", "probe")


@dataclass(frozen=True)
class Transition:
    """What a reported outcome changed. ``write``: the new state to store (``None``: nothing changes).

    ``opened``: closed → open (emit ``subscription.circuit.opened``); ``reopened``: the probe
    failed, half_open → open; ``closed``: the probe succeeded (emit ``subscription.circuit.closed``,
    then drain). ``state`` is the state decided on (from the pure functions), or the state as
    stored afterwards (from the breaker).
    """

    state: CircuitState
    write: CircuitState | None = None
    opened: bool = False
    reopened: bool = False
    closed: bool = False

    @property
    def changed(self) -> bool:
        return self.write is not None


# -- pure transitions ----------------------------------------------------------------------------


def probe_due(state: CircuitState, now: datetime, config: CircuitConfig) -> bool:
    """Whether a caller of ``allow`` may take the probe now."""
    if state.state == "open":
        return state.opened_at is None or now >= state.opened_at + timedelta(milliseconds=config.probe_after_ms)
    if state.state == "half_open":
        started = state.probe_started_at
        return started is None or now >= started + timedelta(milliseconds=config.probe_timeout_ms)
    return False


def decide(
    state: CircuitState,
    holder: str,
    now: datetime,
    config: CircuitConfig,
    *,
    mode: SpoolMode,
    source_kind: SourceKind = "pull",
    hybrid_escalate_after_ms: int = 0,
) -> Decision:
    """May ``holder`` dispatch now? (``allow`` of the breaker, without the store.)"""
    if state.state == "closed":
        return Decision("dispatch", state)
    if state.state == "half_open" and state.probe_holder == holder:
        return Decision("probe", state)  # the holder asking again keeps its turn
    if probe_due(state, now, config):
        taken = replace(state, state="half_open", probe_holder=holder, probe_started_at=now)
        return Decision("probe", state, write=taken)
    since = state.outage_since or state.opened_at
    held = on_downstream_failure(mode, source_kind, since, now, hybrid_escalate_after_ms)
    return Decision("spool" if held == "spool" else "refuse", state)


def on_success(state: CircuitState, holder: str) -> Transition:
    """A dispatch of ``holder`` succeeded."""
    if state.state == "closed":
        if state.consecutive_failures == 0:
            return Transition(state)
        return Transition(state, write=replace(state, consecutive_failures=0))
    if state.state == "half_open" and state.probe_holder == holder:
        return Transition(state, write=CircuitState(version=state.version), closed=True)
    return Transition(state)  # a straggler of an open circuit, or not the probe


def on_failure(state: CircuitState, holder: str, now: datetime, config: CircuitConfig) -> Transition:
    """A dispatch of ``holder`` failed with a downstream-unavailable signal."""
    if state.state == "closed":
        failures = state.consecutive_failures + 1
        if failures < config.trip_after:
            return Transition(state, write=replace(state, consecutive_failures=failures))
        opened = CircuitState(
            state="open", consecutive_failures=failures, opened_at=now, outage_since=now, version=state.version
        )
        return Transition(state, write=opened, opened=True)
    if state.state == "half_open" and state.probe_holder == holder:
        reopened = replace(
            state,
            state="open",
            consecutive_failures=state.consecutive_failures + 1,
            opened_at=now,
            outage_since=state.outage_since or now,
            probe_holder=None,
            probe_started_at=None,
        )
        return Transition(state, write=reopened, reopened=True)
    return Transition(state)  # a straggler: it must not restart the timer


# -- persisted through the KV port ---------------------------------------------------------------


class CircuitContended(Unavailable):
    """Too many concurrent writers on one circuit; retry later."""

    code = "circuit_contended"


def circuit_key(downstream: str) -> str:
    if not isinstance(downstream, str) or not downstream:
        raise ValueError("a downstream must be a non-empty string")
    return KEY_PREFIX + downstream


class CircuitBreaker:
    """The circuit of ``downstream``, stored under ``circuit/<downstream>`` in ``store``.

    Every method reads the document, applies one pure transition, and writes only when it
    changes something, by compare-and-set; a :class:`VersionConflict` means another instance
    wrote first, so it reads again and decides again (up to ``max_attempts`` times, then
    :class:`CircuitContended`). A closed circuit costs one read per ``allow``.
    """

    def __init__(
        self,
        store: KeyValueStore,
        downstream: str,
        config: CircuitConfig,
        *,
        clock: Clock = utc_now,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.key = circuit_key(downstream)
        self.downstream = downstream
        self.config = config
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts

    def state(self) -> CircuitState:
        """The circuit as stored now."""
        return CircuitState.from_entry(self._store.get(self.key))

    def allow(
        self,
        holder: str,
        *,
        mode: SpoolMode,
        source_kind: SourceKind = "pull",
        hybrid_escalate_after_ms: int = 0,
    ) -> Decision:
        """May ``holder`` (an instance and request id, unique per caller) dispatch now? See :class:`Decision`."""
        self._check_holder(holder)

        def step(state: CircuitState, now: datetime) -> tuple[Decision, CircuitState | None]:
            decision = decide(
                state,
                holder,
                now,
                self.config,
                mode=mode,
                source_kind=source_kind,
                hybrid_escalate_after_ms=hybrid_escalate_after_ms,
            )
            return decision, decision.write

        decision, stored = self._apply(step)
        return replace(decision, state=stored)

    def record_success(self, holder: str) -> Transition:
        """Report that ``holder``'s dispatch (or probe) succeeded."""
        self._check_holder(holder)

        def step(state: CircuitState, _now: datetime) -> tuple[Transition, CircuitState | None]:
            transition = on_success(state, holder)
            return transition, transition.write

        transition, stored = self._apply(step)
        return replace(transition, state=stored)

    def record_failure(self, holder: str) -> Transition:
        """Report that ``holder``'s dispatch (or probe) failed because the downstream is unavailable."""
        self._check_holder(holder)

        def step(state: CircuitState, now: datetime) -> tuple[Transition, CircuitState | None]:
            transition = on_failure(state, holder, now, self.config)
            return transition, transition.write

        transition, stored = self._apply(step)
        return replace(transition, state=stored)

    # -- internals ---------------------------------------------------------------------------

    @staticmethod
    def _check_holder(holder: str) -> None:
        if not isinstance(holder, str) or not holder:
            raise ValueError("a holder must be a non-empty string")

    def _apply(self, step: Callable[[CircuitState, datetime], tuple[R, CircuitState | None]]) -> tuple[R, CircuitState]:
        """Read, decide, compare-and-set; again after a conflict. Returns the result and the state as stored."""
        for _attempt in range(self._max_attempts):
            state = CircuitState.from_entry(self._store.get(self.key))
            result, write = step(state, utc(self._clock()))
            if write is None:
                return result, state
            expected = state.version or None
            try:
                entry = self._store.compare_and_set(self.key, write.to_value(), expected_version=expected)
            except VersionConflict:
                continue
            return result, replace(write, version=entry.version)
        raise CircuitContended(
            f"circuit {self.downstream!r} stayed contended for {self._max_attempts} attempts",
            details={"downstream": self.downstream, "attempts": self._max_attempts},
        )
