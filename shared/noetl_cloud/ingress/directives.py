"""Header directives (RFC §7): normalization of a message's metadata and the dispatch plan.

Every source's metadata channel (HTTP headers, Pub/Sub attributes) becomes one ``headers`` map:
lowercased keys, string values, a repeated key arrayed in arrival order (an HTTP server hands a
repeated header over folded into one comma-joined value: :func:`last_member`). Only the keys a
subscription allowlists act as instructions; a value outside a directive's ``allowed`` list or
``map`` is ignored and recorded, never honoured. Everything else is data.

The planner takes only a :class:`VerifiedMessage`, which is minted by the ingress after its
verifier passed (:func:`seal_verified`) or by a pull runtime for its trusted channel
(:func:`seal_trusted_pull`): an unauthenticated request cannot reach routing (§7.5).
This module is pure: data in, plan out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl_cloud.observability import TraceContext

HeaderValue = str | list[str]
MAX_KEY_LENGTH = 512


def normalize_headers(
    pairs: Iterable[tuple[str, str]], *, drop: frozenset[str] = frozenset()
) -> dict[str, HeaderValue]:
    """Lowercase the keys; a key seen twice keeps every value, in order. ``drop`` removes keys
    (credentials) entirely."""
    out: dict[str, HeaderValue] = {}
    for raw_key, raw_value in pairs:
        key = raw_key.strip().lower()
        if not key or key in drop:
            continue
        value = str(raw_value)
        existing = out.get(key)
        if existing is None:
            out[key] = value
        elif isinstance(existing, list):
            existing.append(value)
        else:
            out[key] = [existing, value]
    return out


def last_value(value: HeaderValue | None) -> str | None:
    """The value a directive reads: the last one of a repeated header (RFC §10 OQ7)."""
    if isinstance(value, list):
        return value[-1] if value else None
    return value


def last_member(value: str, known: Collection[str]) -> str:
    """The last value of a header an HTTP server folded into one line: a repeated field arrives
    joined by commas (RFC 9110 §5.3; gunicorn joins with ``,``, others with ``, ``). Read only for
    controls whose values are names, which never hold a comma; a value that is itself one of
    ``known`` is taken whole."""
    if value in known or "," not in value:
        return value
    return value.rsplit(",", 1)[1].strip()


class _Proof:
    """Only this module mints proofs; a VerifiedMessage cannot be made without one."""

    __slots__ = ()


_PROOF = _Proof()


@dataclass(frozen=True)
class VerifiedMessage:
    """A message whose origin was verified (push) or whose channel is trusted (pull)."""

    message_id: str
    source: str
    headers: dict[str, HeaderValue]
    principal: str
    proof: _Proof = field(repr=False)

    def __post_init__(self) -> None:
        if self.proof is not _PROOF:
            raise TypeError("a VerifiedMessage is minted only by seal_verified / seal_trusted_pull")


def seal_verified(message_id: str, source: str, headers: dict[str, HeaderValue], principal: str) -> VerifiedMessage:
    """For the ingress, after ``ingress.verify.verify`` returned an identity."""
    return VerifiedMessage(message_id, source, headers, principal, _PROOF)


def seal_trusted_pull(message_id: str, source: str, headers: dict[str, HeaderValue]) -> VerifiedMessage:
    """For a pull runtime: its subscription channel is authenticated by the source itself."""
    return VerifiedMessage(message_id, source, headers, f"pull:{source}", _PROOF)


@dataclass(frozen=True)
class Applied:
    header: str
    controls: str
    effective_value: str


@dataclass(frozen=True)
class Ignored:
    header: str
    controls: str
    reason: str  # not_allowed | not_mapped | malformed | too_long


@dataclass(frozen=True)
class DispatchPlan:
    """Where one message goes: the verified, allowlisted outcome of its directives."""

    playbook: str
    execution_pool: str | None
    trace: dict[str, str] | None
    idempotency_key: str | None
    dedup: dict[str, Any] | None
    content_type: str | None
    schema_hint: str | None
    applied: tuple[Applied, ...]
    ignored: tuple[Ignored, ...]
    route_override: bool

    def audit(self, message_id: str) -> dict[str, Any]:
        """The body of ``subscription.message.directives_applied`` (RFC §7.6)."""
        return {
            "message_id": message_id,
            "applied": [a.__dict__ for a in self.applied],
            "ignored": [i.__dict__ for i in self.ignored],
            "route_override": self.route_override,
            "trace": self.trace,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "execution_pool": self.execution_pool,
            "trace": self.trace,
            "idempotency_key": self.idempotency_key,
            "dedup": self.dedup,
            "content_type": self.content_type,
            "schema_hint": self.schema_hint,
            "applied": [a.__dict__ for a in self.applied],
            "ignored": [i.__dict__ for i in self.ignored],
            "route_override": self.route_override,
        }


def filter_baggage(baggage: str | None, allowlist: Iterable[str]) -> str | None:
    """Keep the W3C baggage members whose key is allowlisted."""
    if not baggage:
        return None
    allowed = set(allowlist)
    kept = [m.strip() for m in baggage.split(",") if m.strip().split("=", 1)[0].strip() in allowed]
    return ",".join(kept) or None


def plan_dispatch(message: VerifiedMessage, subscription: Mapping[str, Any]) -> DispatchPlan:
    """The dispatch plan of a verified message under a subscription's ``dispatch``, ``headers``
    and ``dedup`` configuration (the mappings of its catalog document)."""
    if not isinstance(message, VerifiedMessage):
        raise TypeError("plan_dispatch takes a VerifiedMessage: verify first")
    dispatch = subscription.get("dispatch") or {}
    header_cfg = subscription.get("headers") or {}
    playbook = str(dispatch["playbook"])
    default_pool = dispatch.get("execution_pool")
    explicit_pool = priority_pool = idempotency_key = content_type = schema_hint = None
    applied: list[Applied] = []
    ignored: list[Ignored] = []
    route_override = False
    for directive in header_cfg.get("directives") or []:
        name, controls = str(directive["header"]).lower(), str(directive["controls"])
        value = last_value(message.headers.get(name))
        if value is None:
            continue
        value = value.strip()
        if controls in ("dispatch.playbook", "dispatch.execution_pool"):
            value = last_member(value, directive.get("allowed") or [])
            if value not in (directive.get("allowed") or []):
                ignored.append(Ignored(name, controls, "not_allowed"))
                continue
            if controls == "dispatch.playbook":
                route_override = value != playbook
                playbook = value
            else:
                explicit_pool = value
        elif controls == "priority":
            mapping = directive.get("map") or {}
            value = last_member(value, mapping)
            if value not in mapping:
                ignored.append(Ignored(name, controls, "not_mapped"))
                continue
            priority_pool = str(mapping[value])
        elif controls == "idempotency_key":
            if not value or len(value) > MAX_KEY_LENGTH:
                ignored.append(Ignored(name, controls, "too_long" if value else "malformed"))
                continue
            idempotency_key = value
        elif controls == "content_type":
            content_type = value
        elif controls == "schema_hint":
            schema_hint = value
        else:  # an unknown control never acts
            ignored.append(Ignored(name, controls, "malformed"))
            continue
        applied.append(Applied(name, controls, value))
    # An explicit pool beats a priority class, which beats the subscription's default.
    pool = explicit_pool or priority_pool or default_pool
    trace = _trace(message.headers, header_cfg.get("trace") or {}, ignored)
    dedup_cfg = subscription.get("dedup") or {}
    dedup = None
    if dedup_cfg.get("enabled") or idempotency_key is not None:
        dedup = {"key": idempotency_key or message.message_id, "window_secs": int(dedup_cfg.get("window_secs", 3600))}
    return DispatchPlan(
        playbook=playbook,
        execution_pool=pool,
        trace=trace,
        idempotency_key=idempotency_key,
        dedup=dedup,
        content_type=content_type,
        schema_hint=schema_hint,
        applied=tuple(applied),
        ignored=tuple(ignored),
        route_override=route_override,
    )


def _trace(
    headers: Mapping[str, HeaderValue], config: Mapping[str, Any], ignored: list[Ignored]
) -> dict[str, str] | None:
    if config.get("propagate") != "w3c":
        return None
    traceparent = last_value(headers.get("traceparent"))
    if traceparent is None:
        return None
    tracestate = last_value(headers.get("tracestate"))
    parsed = TraceContext.parse(
        traceparent,
        tracestate,
        filter_baggage(last_value(headers.get("baggage")), config.get("baggage_allowlist") or ()),
    )
    if parsed is None:  # a malformed traceparent is dropped (and the drop recorded); tracestate stays
        ignored.append(Ignored("traceparent", "trace", "malformed"))
        return {"tracestate": tracestate} if tracestate else None
    return parsed.to_dict()
