"""One push delivery, start to end: verify, limit, parse, plan, forward with the delivery key.

Order matters (RFC §7.5): nothing of the request but the bytes the verifier needs is read before
the verifier passed; the planner takes only a verified message. Then:

* rate limit (per listener, token bucket) -> 429 with ``Retry-After``;
* forward one ``POST /api/execute``: 202 ``{status: accepted, execution_id}`` (200 to a Pub/Sub
  push, whose emulator does not take 202 as an acknowledgement);
* replay protection, keyed on what the scheme signs (``noetl_cloud.ingress.replay``): the id goes
  with the start as its ``delivery`` key, which the control plane claims in the transaction that
  creates the execution, for the listener's replay window. A redelivery after a failure is
  processed (the failed start committed nothing, its key neither), a redelivery after success is
  answered 200 ``{status: duplicate}`` and runs nothing, and of two concurrent copies the second
  waits on the first's key and is its duplicate. No coordination-store round trip: the key costs
  the start one row, in the commit it makes anyway. A spooled delivery keeps its key in the spooled
  request, so a copy spooled twice still runs once.

Failure semantics, with Pub/Sub push backoff in mind: control plane down or 5xx -> 503 (the
source redelivers) unless the subscription spools (``buffer_and_ack`` / ``hybrid``): then a
delivery whose forward fails, or that arrives while the circuit is open, is spooled and answered
202 (Pub/Sub push: 200) ``{status: spooled}`` (see ``noetl_cloud.spool.ingress``); a message that can never
succeed -> for Pub/Sub push 2xx plus a ``subscription.message.dead_lettered`` event (no
redelivery storm), for webhooks 400.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from noetl_cloud import telemetry
from noetl_cloud.errors import ConfigError, NoetlError, Unavailable
from noetl_cloud.ingress.audit import AuditSampler
from noetl_cloud.ingress.directives import plan_dispatch
from noetl_cloud.ingress.listeners import ListenerDirectory
from noetl_cloud.ingress.outcomes import (
    DispatchRejected,
    ListenerInactive,
    ListenerMisconfigured,
    ListenerPaused,
    Outcome,
    RateLimited,
)
from noetl_cloud.ingress.push import BadMessage, PushMessage, pubsub_message, webhook_message
from noetl_cloud.ingress.replay import ReplayPolicy, body_digest, replay_id
from noetl_cloud.ingress.verify import Rejection, VerifiedIdentity, VerifyConfig, credential_headers, verify
from noetl_cloud.observability import Counters
from noetl_cloud.ratelimit import TokenBucket
from noetl_cloud.web.client import ApiClient, segment

log = logging.getLogger(__name__)

ACTIVE_STATES = ("registered", "active")


class Spooler(Protocol):
    """The store-and-forward seam (``noetl_cloud.spool.ingress.IngressSpooler`` fills it)."""

    def gate(self, listener: str, config: dict[str, Any], message: PushMessage) -> Any | None:
        """Before the forward: ``None`` (this subscription does not spool) or a ticket whose
        ``action`` is ``dispatch``, ``probe`` or ``spool`` (``reason`` says why); raises
        ``Unavailable`` when the mode says stop acking while the downstream is down."""
        ...

    def forwarded(self, config: dict[str, Any], ticket: Any, ok: bool) -> None:
        """The forward of ``ticket`` reached the control plane (``ok``) or did not (for the circuit)."""
        ...

    def spool(
        self, listener: str, config: dict[str, Any], message: PushMessage, plan: dict[str, Any], reason: str = ...
    ) -> str:
        """Keep the message durably for a later replay; ``spooled`` or ``dropped`` (dead-lettered by retention)."""
        ...


class IngressService:
    def __init__(
        self,
        directory: ListenerDirectory,
        api: ApiClient,
        *,
        new_id: Callable[[], str],
        jwks_for: Callable[[str | None], Any],
        counters: Counters | None = None,
        sampler: AuditSampler | None = None,
        spooler: Spooler | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.api = api
        self.new_id = new_id
        self.jwks_for = jwks_for
        self.counters = counters or Counters()
        self.sampler = sampler or AuditSampler()
        self.spooler = spooler
        self.clock = clock
        self.monotonic = monotonic
        self._buckets: dict[str, TokenBucket] = {}

    # -- the steps ----------------------------------------------------------------------------

    def config(self, listener: str) -> dict[str, Any]:
        config = self.directory.get(listener)
        state = config.get("state")
        if state == "paused":
            raise ListenerPaused(f"listener {listener!r} is paused; retry later")
        if state not in ACTIVE_STATES:
            raise ListenerInactive(f"listener {listener!r} is {state}", details={"state": state})
        return config

    def handle(
        self,
        listener: str,
        config: dict[str, Any],
        body: bytes,
        header_pairs: Sequence[tuple[str, str]],
        query: Mapping[str, str] | None = None,
    ) -> Outcome:
        # Replay claims, rate buckets and metric labels key on the name the control plane bound.
        listener = str(config.get("listener") or listener)
        self.counters.inc("ingress_received", listener=listener)
        try:
            verify_cfg = VerifyConfig.from_mapping(config.get("verify") or {})
            policy = ReplayPolicy.from_mapping(config.get("verify") or {})
            with telemetry.span("ingress.verify", {"noetl.verify.type": verify_cfg.type}):
                identity = self._verify(listener, config, verify_cfg, body, header_pairs, query or {})
        except ConfigError as exc:  # the operator's problem: logged in full, the sender told nothing of it
            log.error("listener %s is misconfigured: %s", listener, exc.message, extra={"error_code": exc.code})
            raise ListenerMisconfigured() from None
        replayed_as = replay_id(verify_cfg.type, config.get("source"), identity.message_id, body, header_pairs, policy)
        if replayed_as != identity.message_id:
            identity = dataclasses.replace(identity, message_id=replayed_as)
        self._limit(listener, config)
        with telemetry.span("ingress.forward") as forwarding:
            outcome = self._dispatch(listener, config, verify_cfg, identity, policy, body, header_pairs)
            if forwarding is not None:
                forwarding.set_attribute("noetl.outcome", outcome.status)
        return outcome

    def _verify(
        self,
        listener: str,
        config: dict[str, Any],
        verify_cfg: VerifyConfig,
        body: bytes,
        header_pairs: Sequence[tuple[str, str]],
        query: Mapping[str, str],
    ) -> VerifiedIdentity:
        headers = dict(header_pairs)  # case kept: the verifier refuses one header given twice in two cases
        try:
            return verify(
                body,
                headers,
                verify_cfg,
                (config.get("verify") or {}).get("secret"),
                now=self.clock,
                jwks=self.jwks_for(verify_cfg.jwks_url) if verify_cfg.type == "pubsub_oidc" else None,
                query=query,
            )
        except Rejection as exc:
            self.counters.inc("ingress_rejected", listener=listener, reason=exc.code)
            suppressed = self.sampler.admit(listener, exc.code)
            if suppressed is not None:
                self._audit(
                    listener,
                    "subscription.message.rejected",
                    {"reason": exc.code, "status": exc.status, "suppressed": suppressed},
                )
            raise

    def _limit(self, listener: str, config: dict[str, Any]) -> None:
        limit = config.get("rate_limit") or {}
        per_sec = limit.get("per_sec")
        if not per_sec:
            return
        bucket = self._buckets.get(listener)
        if bucket is None or bucket.rate != float(per_sec):
            bucket = TokenBucket(float(per_sec), float(limit.get("burst") or per_sec), clock=self.monotonic)
            self._buckets[listener] = bucket
        if not bucket.take():
            self.counters.inc("ingress_rate_limited", listener=listener)
            raise RateLimited(bucket.retry_after())

    def _parse(
        self,
        config: dict[str, Any],
        verify_cfg: VerifyConfig,
        identity: VerifiedIdentity,
        body: bytes,
        header_pairs: Sequence[tuple[str, str]],
    ) -> PushMessage:
        payload_from = (config.get("dispatch") or {}).get("payload_from", "message.json")
        drop = credential_headers(verify_cfg)
        if config.get("source") == "pubsub":
            return pubsub_message(
                body,
                header_pairs,
                principal=identity.principal,
                payload_from=payload_from,
                drop=drop,
                new_id=self.new_id,
            )
        return webhook_message(
            body,
            header_pairs,
            message_id=identity.message_id or body_digest(body),
            principal=identity.principal,
            payload_from=payload_from,
            drop=drop,
            new_id=self.new_id,
        )

    def _dispatch(
        self,
        listener: str,
        config: dict[str, Any],
        verify_cfg: VerifyConfig,
        identity: VerifiedIdentity,
        policy: ReplayPolicy,
        body: bytes,
        header_pairs: Sequence[tuple[str, str]],
    ) -> Outcome:
        try:
            message = self._parse(config, verify_cfg, identity, body, header_pairs)
        except BadMessage as exc:
            return self._permanent(listener, config, exc.message_id or identity.message_id, exc)
        plan = plan_dispatch(message.message, config)
        meta: dict[str, Any] = {
            "message_id": message.message.message_id,
            "listener": listener,
            "source": message.message.source,
            "subscription_path": config.get("path"),
            "principal": identity.principal,
        }
        if plan.applied or plan.ignored:
            meta["directives"] = plan.audit(message.message.message_id)
        for hint in ("content_type", "schema_hint"):
            if getattr(plan, hint):
                meta[hint] = getattr(plan, hint)
        request: dict[str, Any] = {"path": plan.playbook, "workload": message.workload(), "meta": meta}
        if plan.execution_pool:
            request["execution_pool"] = plan.execution_pool
        trace = telemetry.forward_trace(plan.trace)  # the execution continues this span's trace when tracing
        if trace and trace.get("traceparent"):
            request["trace"] = trace
        if config.get("subscription_id"):
            request["parent_execution_id"] = config["subscription_id"]
        if plan.dedup:
            request["dedup"] = plan.dedup
        if identity.message_id:  # replay protection: claimed with the start (the module's docstring)
            request["delivery"] = {
                "key": delivery_key(listener, identity.message_id, message),
                "window_secs": math.ceil(policy.window_s),
            }
        # What a replay needs besides the workload: the verified plan and the request around it.
        spool_plan = {**plan.to_dict(), "request": {k: v for k, v in request.items() if k != "workload"}}
        ticket = self.spooler.gate(listener, config, message) if self.spooler is not None else None
        if ticket is not None and ticket.action == "spool":
            return self._spooled(listener, config, message, spool_plan, ticket.reason)
        try:
            response = self.api.post("/api/execute", json=request)
        except NoetlError as exc:
            return self._downstream_failed(listener, config, message, spool_plan, exc, ticket)
        if response.status >= 500:
            return self._downstream_failed(listener, config, message, spool_plan, None, ticket)
        if ticket is not None and self.spooler is not None:
            self.spooler.forwarded(config, ticket, True)
        if response.status >= 400:
            error = (response.json or {}).get("error", {}) if isinstance(response.json, dict) else {}
            return self._permanent(
                listener,
                config,
                message.message.message_id,
                DispatchRejected(f"the control plane refused the dispatch: {error.get('code', response.status)}"),
            )
        body_json = response.json if isinstance(response.json, dict) else {}
        if body_json.get("status") == "duplicate":  # a delivery (or dedup) key already held: ran nothing
            self.counters.inc("ingress_replayed", listener=listener)
            return Outcome("duplicate", 200, execution_id=body_json.get("execution_id"))
        self.counters.inc("ingress_dispatched", listener=listener)
        return Outcome("accepted", _accepted_status(config), execution_id=body_json.get("execution_id"))

    def _downstream_failed(
        self,
        listener: str,
        config: dict[str, Any],
        message: PushMessage,
        plan: dict[str, Any],
        exc: NoetlError | None,
        ticket: Any = None,
    ) -> Outcome:
        if ticket is not None and self.spooler is not None:
            self.spooler.forwarded(config, ticket, False)
        spool_mode = (config.get("spool") or {}).get("mode")
        if self.spooler is not None and spool_mode in ("buffer_and_ack", "hybrid"):
            return self._spooled(listener, config, message, plan, "forward_failed")
        raise Unavailable("the control plane is unavailable; retry later", code="control_plane_unavailable") from exc

    def _spooled(
        self, listener: str, config: dict[str, Any], message: PushMessage, plan: dict[str, Any], reason: str
    ) -> Outcome:
        """Spooled (or dropped to the dead-letter prefix by retention): durable, so the source may ack."""
        assert self.spooler is not None
        status = self.spooler.spool(listener, config, message, plan, reason)
        self.counters.inc("ingress_spooled" if status == "spooled" else "ingress_dropped", listener=listener)
        return Outcome(status, _accepted_status(config), reason=reason)

    def _permanent(self, listener: str, config: dict[str, Any], message_id: str | None, exc: NoetlError) -> Outcome:
        """A message that can never succeed: Pub/Sub gets a 2xx (no redelivery storm) and the
        event log a dead-letter record; a webhook sender gets the error."""
        self.counters.inc("ingress_dead_lettered", listener=listener, reason=exc.code)
        if config.get("source") == "pubsub":
            self._audit(
                listener,
                "subscription.message.dead_lettered",
                {"reason": exc.code, "message_id": message_id, "detail": exc.message},
            )
            return Outcome("dead_lettered", 200, reason=exc.code)
        raise exc

    def _audit(self, listener: str, event_type: str, payload: dict[str, Any]) -> None:
        """Best effort: an audit record must never turn a verdict into a 5xx."""
        try:
            self.api.post(
                f"/api/internal/ingress/{segment(listener)}/audit", json={"event_type": event_type, "payload": payload}
            )
        except NoetlError:
            log.warning("audit event not recorded", extra={"listener": listener, "event_type": event_type})


def delivery_key(listener: str, replay_id: str, message: PushMessage) -> str:
    """The key of a delivery's replay protection: the listener and the id its scheme signs; for a
    Pub/Sub push also the message's publish time, which a redelivery (or a replay of the captured
    envelope) repeats, and which tells apart two messages given one id (an emulator restarted, or a
    topic created again, numbers its messages anew)."""
    stamp = f"@{message.publish_time}" if message.publish_time else ""
    return f"{listener}/{replay_id}{stamp}"[:512]


def _accepted_status(config: dict[str, Any]) -> int:
    """The answer to a delivery that was accepted or spooled: 202 for a webhook sender; 200 for a
    Pub/Sub push. Pub/Sub documents 202 as an acknowledgement, but its emulator counts only 200 (and
    a few others) as one and redelivers every 202, over and over (tests/e2e/test_faults.py)."""
    return 200 if config.get("source") == "pubsub" else 202
