"""The runtime's ports: where messages come from (:class:`SourceClient`) and where they go
(:class:`ControlClient`).

A source delivers :class:`Received` messages, each leased to this process until it is acked or
nacked; the runtime never holds more than ``max_in_flight`` of them (the source's flow control
stops fetching at the cap). The control client is the control plane as the runtime sees it:
the subscription's lifecycle, dispatch (one execution per message), and the runtime's own
events. Adapters: :mod:`~noetl_cloud.runtime.pubsub`, :mod:`~noetl_cloud.runtime.nats`,
:mod:`~noetl_cloud.runtime.memory` (tests, embedded) for sources; :mod:`~noetl_cloud.runtime.api`
(the execute role's HTTP API) and :mod:`~noetl_cloud.runtime.local` (the in-process runner of
``noetl-cloud subscribe --local``) for the control plane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class SourceMessage:
    """One message as its source gave it: bytes, the metadata channel, and where it stands."""

    message_id: str
    data: bytes
    # The raw per-source metadata (Pub/Sub attributes, NATS headers) as ordered pairs; a NATS
    # header may repeat. Normalized into ``message.headers`` by the runtime (RFC §7.1).
    header_pairs: tuple[tuple[str, str], ...] = ()
    publish_time: str | None = None
    ordering_key: str | None = None
    delivery_attempt: int | None = None

    @property
    def attributes(self) -> dict[str, str]:
        """The raw map (``message.attributes``): the last value of a repeated key."""
        return dict(self.header_pairs)


class Received(Protocol):
    """A message leased to this process. Exactly one of :meth:`ack` / :meth:`nack` is called."""

    @property
    def message(self) -> SourceMessage:
        """What the source delivered."""
        ...

    @property
    def ack_id(self) -> str | None:
        """The source's handle, for acknowledging later by id (Mode A ``ack: manual``)."""
        ...

    def ack(self) -> None:
        """Done with it: the source forgets it."""
        ...

    def nack(self) -> None:
        """Give it back: the source redelivers it (to this or another consumer)."""
        ...


class SourceClient(Protocol):
    """A subscription of one source, consumed continuously (Mode B) or in bounded pulls (Mode A)."""

    def start(self, on_message: Callable[[Received], None], *, max_in_flight: int) -> None:
        """Begin delivering messages to ``on_message`` (from the source's threads); at most
        ``max_in_flight`` delivered and not yet acked or nacked at any time."""
        ...

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop fetching. Messages fetched but not yet handed to ``on_message`` go back to the
        source; handed ones stay leased until their ack / nack. Idempotent."""
        ...

    def fetch(self, max_messages: int, timeout_s: float) -> list[Received]:
        """One bounded pull (Mode A): at most ``max_messages``, waiting at most ``timeout_s``."""
        ...

    def acknowledge(self, ack_ids: Sequence[str]) -> None:
        """Ack messages of earlier :meth:`fetch` calls by their ``ack_id`` (Mode A ``ack: manual``)."""
        ...

    def release(self, ack_ids: Sequence[str]) -> None:
        """Nack messages of earlier :meth:`fetch` calls by their ``ack_id``: redelivered at once."""
        ...

    def close(self) -> None:
        """Release connections (after :meth:`stop`)."""
        ...


@dataclass(frozen=True)
class ItemOutcome:
    """The control plane's answer for one dispatched message.

    ``accepted`` (a new execution), ``duplicate`` (the dedup window collapsed it into an existing
    one), ``rejected`` (the request can never succeed: a 4xx for the item), ``unavailable`` (try
    again later: the call failed or answered 5xx).
    """

    status: Literal["accepted", "duplicate", "rejected", "unavailable"]
    execution_id: str | None = None
    error: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        """The control plane took the message: it may be acked."""
        return self.status in ("accepted", "duplicate")


@dataclass(frozen=True)
class RuntimeEvent:
    """An event of the runtime itself (``subscription.rate_limited``), for the event log."""

    event_type: str
    payload: dict[str, Any]
    idempotency_key: str
    event_time: str  # RFC 3339, the runtime's clock
    meta: dict[str, Any] = field(default_factory=dict)


class ControlClient(Protocol):
    """The control plane as the subscription runtime uses it."""

    def load(self, path: str) -> dict[str, Any]:
        """The subscription's catalog document (the latest version)."""
        ...

    def register(self, path: str) -> dict[str, Any]:
        """Register the subscription (a live registration of the path is reused): its view
        ``{subscription_id, state, version, ...}``."""
        ...

    def transition(self, subscription_id: str, action: str) -> dict[str, Any]:
        """Move the subscription (``activate``, ``drain``, ``deactivate``...); its new view.
        Raises :class:`~noetl_cloud.errors.Conflict` when its state does not allow it."""
        ...

    def state(self, subscription_id: str) -> dict[str, Any]:
        """The subscription's current view."""
        ...

    def dispatch(self, requests: Sequence[dict[str, Any]], *, batch: bool) -> list[ItemOutcome]:
        """Start one execution per request (``/api/execute/batch`` when ``batch``, else one
        ``/api/execute`` each); one outcome per request, in order. Never raises for a
        per-item failure; an unreachable control plane is ``unavailable`` for every item."""
        ...

    def record(self, subscription_id: str, events: Sequence[RuntimeEvent]) -> None:
        """Append the runtime's events to the subscription's event trail (idempotent per key)."""
        ...
