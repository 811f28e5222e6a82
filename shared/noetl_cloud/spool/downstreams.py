"""The circuits of a subscription's declared downstreams (RFC §8.1, OQ2): fed by execution outcomes.

The control-plane circuit (``execute:<api url>``) is fed by the forward itself: the ingress or the
runtime sees the answer. A downstream the *playbook* depends on (a database, an API) is only seen
failing by the execution, long after the forward was answered. So the execute role, which folds
every command report and ends every execution, reports the end of each execution dispatched by a
subscription that declares ``downstreams`` (:class:`DownstreamWatcher`, after the report's
transaction commits, best effort). The circuits live in the same coordination store as the
control-plane circuit (``circuit/downstream:<subscription>#<name>``), so the ingress, runtime and
drainer read them in the one read they already make per delivery.

**What counts** (:func:`verdicts`). An execution that ends ``failed`` is looked through for the
tool errors in its failure (a step's error, nested as the orchestrator records it). A *retryable*
one (:func:`retryable`: kind ``connection`` or ``timeout``, ``http_status`` 5xx or 429) that a
declared downstream claims (:func:`claimed_by`: its ``error.target`` host or auth alias, or its
step's name) is a failure of that downstream. An execution that ends ``completed`` is a success of
every declared downstream (it reached them all, or needed none). Any other end says nothing, with
one exception: the probe's execution (below) that ends without a retryable error against its
downstream is a success of it, so a probe whose playbook fails for another reason does not hold the
circuit half-open until ``probe_timeout_ms``.

**The probe.** While a downstream circuit is open the gate spools every new message; only the
drainer probes, with the oldest spooled item: it takes the probe (``half_open``) with its own holder
and replays that one item with ``meta.spool.probe = {<name>: <holder>}``; the execution carries the
holder to its end, where this watcher reports under it. Success closes the circuit and asks the
drainer to drain at once; failure re-opens it with a fresh timer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import urllib3

from noetl_cloud.envelope import utc_now
from noetl_cloud.errors import NoetlError
from noetl_cloud.kv.port import Clock, KeyValueStore
from noetl_cloud.spec.downstreams import Downstream
from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.circuit import CircuitBreaker, CircuitConfig, probe_due
from noetl_cloud.spool.policy import SourceKind, SpoolMode

log = logging.getLogger(__name__)

RETRYABLE_KINDS: Final = frozenset({"connection", "timeout"})
PREFIX: Final = "downstream:"
MAX_DEPTH: Final = 8
Verdict = Literal["ok", "failed"]


def downstream_id(subscription: str, name: str) -> str:
    """The circuit's downstream id (its KV key is ``circuit/`` + this)."""
    return f"{PREFIX}{subscription}#{name}"


def circuit_ids(subscription: str, downstreams: Sequence[Any]) -> tuple[str, ...]:
    """The circuit ids of declared downstreams (models, their JSON form, or names)."""
    ids = []
    for downstream in downstreams:
        if isinstance(downstream, Downstream):
            name = downstream.name
        elif isinstance(downstream, Mapping):
            name = str(downstream.get("name"))
        else:
            name = str(downstream)
        ids.append(downstream_id(subscription, name))
    return tuple(ids)


@dataclass(frozen=True)
class ToolFailure:
    """One tool error found in an execution's failure, with the step it failed in."""

    kind: str
    status: int | None
    target: Mapping[str, Any]
    step: str | None


def tool_failures(error: Any, step: str | None = None, depth: int = 0) -> Iterator[ToolFailure]:
    """The tool errors inside an execution's (or step's) error, depth first."""
    if not isinstance(error, Mapping) or depth > MAX_DEPTH:
        return
    step = error.get("step") if isinstance(error.get("step"), str) else step
    inner = error.get("error")
    if isinstance(inner, Mapping):
        yield from tool_failures(inner, step, depth + 1)
    kind = error.get("kind")
    if isinstance(kind, str) and (kind in RETRYABLE_KINDS or kind == "http_status" or "target" in error):
        status = error.get("status")
        target = error.get("target")
        yield ToolFailure(
            kind,
            status if isinstance(status, int) and not isinstance(status, bool) else None,
            target if isinstance(target, Mapping) else {},
            step,
        )


def retryable(failure: ToolFailure) -> bool:
    """No connection, a timeout, or an HTTP 5xx / 429 answer: the downstream is unavailable, not the input wrong."""
    if failure.kind in RETRYABLE_KINDS:
        return True
    return (
        failure.kind == "http_status"
        and failure.status is not None
        and (failure.status >= 500 or failure.status == 429)
    )


def claimed_by(downstreams: Sequence[Downstream], failure: ToolFailure) -> Downstream | None:
    """The declared downstream this failure is of: by HTTP host (``host`` or ``host:port``), postgres
    ``auth`` alias, then the failing step's name."""
    host = failure.target.get("http_host")
    port = failure.target.get("http_port")
    alias = failure.target.get("postgres_auth")
    for downstream in downstreams:
        if isinstance(host, str) and any(_host_matches(d, host, port) for d in downstream.http_hosts):
            return downstream
        if isinstance(alias, str) and alias in downstream.postgres_auth:
            return downstream
    if failure.step is not None:
        for downstream in downstreams:
            if failure.step in downstream.steps:
                return downstream
    return None


def _host_matches(declared: str, host: str, port: Any) -> bool:
    """``host`` matches any port; ``host:port`` that port only (parsed as a URL authority, like the tool does)."""
    parsed = urllib3.util.parse_url("http://" + declared)
    if (parsed.host or "").lower() != host.lower():
        return False
    return parsed.port is None or parsed.port == port


def verdicts(
    downstreams: Sequence[Downstream], status: str, error: Any, probes: Mapping[str, str] | None = None
) -> dict[str, Verdict]:
    """What one ended execution says of each declared downstream (absent: nothing)."""
    if status == "completed":
        return {d.name: "ok" for d in downstreams}
    found: dict[str, Verdict] = {}
    if status == "failed":
        for failure in tool_failures(error):
            if retryable(failure):
                claimed = claimed_by(downstreams, failure)
                if claimed is not None:
                    found[claimed.name] = "failed"
    for name in probes or {}:
        if any(d.name == name for d in downstreams):
            found.setdefault(name, "ok")
    return found


# -- the drainer's probe ---------------------------------------------------------------------------


def take_probes(
    kv: KeyValueStore,
    circuits: Sequence[str],
    config: CircuitConfig,
    clock: Clock,
    holder: str,
    *,
    mode: SpoolMode,
    source_kind: SourceKind,
    hybrid_escalate_after_ms: int,
) -> dict[str, str] | None:
    """For a drain: ``{}`` when every downstream circuit is closed; ``{name: holder}`` of the probes
    ``holder`` took (every circuit not closed was due); ``None`` when one is open and not due yet, or
    another drainer holds its probe (replay nothing)."""
    breakers = [CircuitBreaker(kv, circuit, config, clock=clock) for circuit in circuits]
    held = []
    for breaker in breakers:
        state = breaker.state()
        if state.state != "closed":
            if not probe_due(state, clock(), config):
                return None
            held.append(breaker)
    probes = {}
    for breaker in held:
        decision = breaker.allow(
            holder, mode=mode, source_kind=source_kind, hybrid_escalate_after_ms=hybrid_escalate_after_ms
        )
        if decision.action != "probe":
            return None
        probes[breaker.downstream.rpartition("#")[2]] = holder
    return probes


def probe_verdict(
    kv: KeyValueStore, circuits: Sequence[str], config: CircuitConfig, clock: Clock
) -> Literal["closed", "open", "pending"]:
    """After a probe: every circuit closed, one re-opened, or still half-open."""
    states = [CircuitBreaker(kv, circuit, config, clock=clock).state().state for circuit in circuits]
    if all(state == "closed" for state in states):
        return "closed"
    return "open" if any(state == "open" for state in states) else "pending"


# -- the watcher in the execute role ---------------------------------------------------------------

#: The subscription's ``spool`` block and its downstreams, or ``None`` (not a subscription, none declared).
SpecLookup = Callable[[str], tuple[Spool, list[Downstream]] | None]


class DownstreamWatcher:
    """Reports ended executions to their subscription's downstream circuits (one per execute process)."""

    def __init__(
        self,
        kv: KeyValueStore,
        lookup: SpecLookup,
        journal: ev.EventJournal,
        *,
        on_closed: Callable[[str], None] | None = None,
        cache_s: float = 10.0,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.lookup = lookup
        self.journal = journal
        self.on_closed = on_closed
        self.cache_s = cache_s
        self.clock = clock
        self.monotonic = monotonic
        self._specs: dict[str, tuple[float, tuple[Spool, list[Downstream]] | None]] = {}
        self._lock = threading.Lock()

    def spec(self, subscription: str) -> tuple[Spool, list[Downstream]] | None:
        now = self.monotonic()
        with self._lock:
            cached = self._specs.get(subscription)
        if cached is not None and cached[0] > now:
            return cached[1]
        found = self.lookup(subscription)
        with self._lock:
            if len(self._specs) > 4096:
                self._specs.clear()
            self._specs[subscription] = (now + self.cache_s, found)
        return found

    def observe(
        self, subscription: str, execution_id: str, status: str, error: Any, probes: Mapping[str, str] | None = None
    ) -> dict[str, Verdict]:
        """Report one ended execution; never raises (a store outage must not fail a worker's report)."""
        try:
            return self._observe(subscription, execution_id, status, error, probes or {})
        except (NoetlError, ValueError) as exc:
            log.warning(
                "downstream circuits not updated",
                extra={"subscription": subscription, "execution_id": execution_id, "error": type(exc).__name__},
            )
            return {}

    def _observe(
        self, subscription: str, execution_id: str, status: str, error: Any, probes: Mapping[str, str]
    ) -> dict[str, Verdict]:
        spec = self.spec(subscription)
        if spec is None:
            return {}
        spool, downstreams = spec
        found = verdicts(downstreams, status, error, probes)
        config = CircuitConfig.from_spec(spool.circuit)
        for name, verdict in found.items():
            breaker = CircuitBreaker(self.kv, downstream_id(subscription, name), config, clock=self.clock)
            holder = probes.get(name) or f"execution:{execution_id}"
            if verdict == "failed":
                transition = breaker.record_failure(holder)
                if transition.opened:
                    opened_at = transition.state.opened_at
                    assert opened_at is not None
                    failures = transition.state.consecutive_failures
                    log.warning("downstream circuit opened", extra={"downstream": breaker.downstream})
                    self._emit(subscription, ev.circuit_opened(breaker.downstream, subscription, opened_at, failures))
                continue
            before = breaker.state()
            if before.state == "closed" and before.consecutive_failures == 0:
                continue  # the common case: one read, no write
            transition = breaker.record_success(holder)
            if transition.closed:
                log.info("downstream circuit closed", extra={"downstream": breaker.downstream})
                since = before.outage_since or before.opened_at
                closed = ev.circuit_closed(breaker.downstream, subscription, since, self.clock())
                self._emit(subscription, closed)
                if self.on_closed is not None:
                    self.on_closed(subscription)
        return found

    def _emit(self, subscription: str, event: ev.SpoolEvent) -> None:
        try:
            self.journal.emit(subscription, [event])
        except NoetlError:
            log.error("downstream circuit event neither recorded nor parked", extra={"type": event.event_type})
