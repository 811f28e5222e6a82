"""The spool as the subscription runtime sees it (RFC §8.2 for a pull source).

The same :class:`~noetl_cloud.spool.engine.SpoolEngine` as the ingress, with the source kind
``pull``: a pull source redelivers, so ``hybrid`` stops acking during a short outage (the source
keeps the backlog) and spools once the outage outlives ``hybrid_escalate_after_ms``;
``buffer_and_ack`` spools at once; ``off`` never spools (the engine refuses with
:class:`~noetl_cloud.spool.engine.CircuitOpen`, and the runtime nacks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from noetl_cloud.runtime.message import Prepared
from noetl_cloud.spool.engine import Gate, SpoolEngine, payload_bytes
from noetl_cloud.spool.ingress import ordering_value
from noetl_cloud.spool.policy import FailureAction, on_downstream_failure
from noetl_cloud.spool.target import SpoolTarget


class RuntimeSpooler:
    """One subscription's spool and downstream circuit, for the runtime's dispatches."""

    def __init__(
        self,
        engine: SpoolEngine,
        path: str,
        spool: Mapping[str, Any] | None,
        downstream: str,
        downstreams: Sequence[Any] | None = None,
    ) -> None:
        self.engine = engine
        self.target = SpoolTarget.from_spec(
            path, dict(spool or {}), source_kind="pull", downstream=downstream, downstreams=downstreams
        )

    @property
    def enabled(self) -> bool:
        return self.target.enabled

    def gate(self) -> Gate:
        """Dispatch, probe or spool the next chunk; ``CircuitOpen`` when the mode stops acking."""
        return self.engine.gate(self.target)

    def report(self, gate: Gate, ok: bool) -> None:
        self.engine.report(self.target, gate, ok)

    def on_failure(self) -> FailureAction:
        """Spool or stop acking, for a message whose dispatch just failed."""
        spool = self.target.spool
        state = self.engine.breaker(self.target).state()
        since = state.outage_since or state.opened_at
        return on_downstream_failure(spool.mode, "pull", since, self.engine.clock(), spool.hybrid_escalate_after_ms)

    def spool(self, prepared: Prepared, source: str, reason: str) -> str:
        """Keep the message durably: ``spooled`` or ``dropped`` (retention's ``drop_to_dlq``);
        ``SpoolFull`` / ``Unavailable`` when it could not be kept (the caller nacks)."""
        message = prepared.message
        plan = prepared.spool_plan()
        spooled = self.engine.spool(
            self.target,
            payload_bytes(message.workload()),
            message_id=message.message.message_id,
            source=source,
            plan=plan,
            reason=reason,
            idempotency_key=plan.get("idempotency_key"),
            ordering_key=ordering_value(message, self.target.spool.ordering_key),
        )
        return spooled.status
