"""In-memory adapters of the runtime's ports: a source with leases and redelivery, and a control
plane with the lifecycle state machine, a dedup window and an outage switch. Unit tests and the
embedded local mode use them; they keep the semantics the real adapters are tested for."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from noetl_cloud.errors import Conflict, NotFound
from noetl_cloud.runtime.port import ItemOutcome, Received, RuntimeEvent, SourceMessage

# action -> (states it may start from, state it leads to): the control plane's lifecycle.
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "activate": (frozenset({"registered"}), "active"),
    "pause": (frozenset({"active"}), "paused"),
    "resume": (frozenset({"paused"}), "active"),
    "drain": (frozenset({"active", "paused"}), "draining"),
    "deactivate": (frozenset({"registered", "active", "paused", "draining"}), "deactivated"),
}


EVENTS = {
    "activate": "subscription.activated",
    "pause": "subscription.paused",
    "resume": "subscription.resumed",
    "drain": "subscription.draining",
    "deactivate": "subscription.deactivated",
}


class _Delivery:
    def __init__(self, source: InMemorySource, message: SourceMessage) -> None:
        self.source = source
        self.message = message
        self.ack_id: str | None = f"{message.message_id}:{message.delivery_attempt}"

    def ack(self) -> None:
        self.source._settle(self, ack=True)

    def nack(self) -> None:
        self.source._settle(self, ack=False)


class InMemorySource:
    """A subscription in memory: published messages wait until delivered; a nack redelivers.
    :meth:`consumer` gives another consumer of the same subscription (another runtime instance)."""

    def __init__(self) -> None:
        self._pending: deque[SourceMessage] = deque()
        self._outstanding: dict[int, _Delivery] = {}
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._own = InMemoryConsumer(self)
        self.acked: list[str] = []
        self.nacked: list[str] = []

    def publish(self, data: bytes, attributes: dict[str, str] | None = None, *, message_id: str | None = None) -> str:
        mid = message_id or str(next(self._ids))
        with self._cond:
            self._pending.append(SourceMessage(mid, data, tuple((attributes or {}).items()), delivery_attempt=1))
            self._cond.notify_all()
        return mid

    def consumer(self) -> InMemoryConsumer:
        """One more consumer of this subscription: its own delivery loop over the same backlog."""
        return InMemoryConsumer(self)

    @property
    def backlog(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def outstanding(self) -> int:
        with self._cond:
            return len(self._outstanding)

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        self._own.start(on_message, max_in_flight=max_in_flight)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._own.stop(timeout_s)

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        out: list[Received] = []
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout_s)
            while self._pending and len(out) < max_messages:
                delivery = _Delivery(self, self._pending.popleft())
                self._outstanding[id(delivery)] = delivery
                out.append(delivery)
        return out

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        wanted = set(ack_ids)
        with self._cond:
            found = [d for d in self._outstanding.values() if d.ack_id in wanted]
        for delivery in found:
            delivery.ack()

    def release(self, ack_ids: Sequence[str]) -> None:
        wanted = set(ack_ids)
        with self._cond:
            found = [d for d in self._outstanding.values() if d.ack_id in wanted]
        for delivery in found:
            delivery.nack()

    def close(self) -> None:
        self.stop()

    def _settle(self, delivery: _Delivery, *, ack: bool) -> None:
        with self._cond:
            if self._outstanding.pop(id(delivery), None) is None:
                return  # settled twice: the second is ignored, as Pub/Sub does
            if ack:
                self.acked.append(delivery.message.message_id)
            else:
                self.nacked.append(delivery.message.message_id)
                attempt = (delivery.message.delivery_attempt or 1) + 1
                self._pending.appendleft(replace(delivery.message, delivery_attempt=attempt))
            self._cond.notify_all()


class InMemoryConsumer:
    """One consumer of an :class:`InMemorySource`: it holds at most ``max_in_flight`` of the
    subscription's messages; stopping it stops only its own deliveries (its held ones stay leased)."""

    def __init__(self, subscription: InMemorySource) -> None:
        self.subscription = subscription
        self._held: set[int] = set()
        self._thread: threading.Thread | None = None
        self._running = False

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        sub = self.subscription
        with sub._cond:
            if self._running:
                return
            self._running = True

        def deliver() -> None:
            while True:
                with sub._cond:
                    while self._running and (
                        not sub._pending or len(self._held & sub._outstanding.keys()) >= max_in_flight
                    ):
                        sub._cond.wait(0.05)
                    if not self._running:
                        return
                    delivery = _Delivery(sub, sub._pending.popleft())
                    sub._outstanding[id(delivery)] = delivery
                    self._held = (self._held & sub._outstanding.keys()) | {id(delivery)}
                on_message(delivery)

        self._thread = threading.Thread(target=deliver, name="memory-source", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        with self.subscription._cond:
            self._running = False
            self.subscription._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        return self.subscription.fetch(max_messages, timeout_s)

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        self.subscription.acknowledge(ack_ids)

    def release(self, ack_ids: Sequence[str]) -> None:
        self.subscription.release(ack_ids)

    def close(self) -> None:
        self.stop()


@dataclass
class InMemoryControl:
    """The control plane's lifecycle and dispatch, in memory. ``down`` makes every dispatch
    ``unavailable``; ``reject`` names playbooks whose requests are refused."""

    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    trail: list[tuple[str, str]] = field(default_factory=list)  # (subscription_id, event type)
    executions: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, RuntimeEvent]] = field(default_factory=list)
    calls: list[tuple[str, int]] = field(default_factory=list)  # ("batch" | "single", items)
    down: bool = False
    reject: set[str] = field(default_factory=set)
    _dedup: dict[str, str] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def load(self, path: str) -> dict[str, Any]:
        try:
            return self.documents[path]
        except KeyError:
            raise NotFound(f"no catalog entry {path}", code="catalog_not_found") from None

    def register(self, path: str) -> dict[str, Any]:
        with self._lock:
            for view in self.subscriptions.values():
                if view["path"] == path and view["state"] != "deactivated":
                    return dict(view)
            sid = str(next(self._ids))
            view = {"subscription_id": sid, "path": path, "state": "registered", "version": 1}
            self.subscriptions[sid] = view
            self.trail.append((sid, "subscription.registered"))
            return dict(view)

    def transition(self, subscription_id: str, action: str) -> dict[str, Any]:
        with self._lock:
            view = self.subscriptions[subscription_id]
            allowed, target = TRANSITIONS[action]
            if view["state"] not in allowed:
                raise Conflict(f"cannot {action} a subscription that is {view['state']}", code="invalid_transition")
            view["state"] = target
            view["version"] += 1
            self.trail.append((subscription_id, EVENTS[action]))
            return dict(view)

    def state(self, subscription_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self.subscriptions[subscription_id])

    def dispatch(self, requests: Sequence[dict[str, Any]], *, batch: bool) -> list[ItemOutcome]:
        with self._lock:
            if batch:
                self.calls.append(("batch", len(requests)))
            else:
                self.calls.extend(("single", 1) for _ in requests)
            if self.down:
                return [ItemOutcome("unavailable", error={"code": "upstream_unavailable"})] * len(requests)
            outcomes = []
            for request in requests:
                if request["path"] in self.reject:
                    outcomes.append(ItemOutcome("rejected", error={"code": "playbook_not_found"}))
                    continue
                dedup = request.get("dedup")
                key = f"{request.get('parent_execution_id')}/{dedup['key']}" if dedup else None
                if key is not None and key in self._dedup:
                    outcomes.append(ItemOutcome("duplicate", self._dedup[key]))
                    continue
                eid = str(next(self._ids))
                if key is not None:
                    self._dedup[key] = eid
                self.executions.append({**request, "execution_id": eid})
                outcomes.append(ItemOutcome("accepted", eid))
            return outcomes

    def record(self, subscription_id: str, events: Sequence[RuntimeEvent]) -> None:
        with self._lock:
            self.events.extend((subscription_id, e) for e in events)
