"""``kind: Subscription``: a source-driven catalog entry (subscription-listener RFC §2.1, §4.4).

One document carries the three activation modes: pull on a cadence (Mode A, ``activation:
scheduled``), continuous pull (Mode B) and push through ``POST /ingress/{listener}`` (Mode C, which
must verify every delivery, §6). ``headers`` is the directive allowlist of §7, ``spool`` the
store-and-forward layer of §8, ``downstreams`` what its playbook depends on (§8.1, the circuits that
spool it), ``limits`` and ``dedup`` the scale hardening of Phase 7.

Rules that only this document can check are enforced here; the checks against the rest of the
catalog (the playbooks exist, the pools are configured, a gateway path is not taken) belong to the
catalog service, which uses :meth:`SubscriptionDoc.route_targets`, :meth:`SubscriptionDoc.pool_targets`
and :meth:`SubscriptionDoc.listener`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from noetl_cloud.spec.cadence import cadence_problem
from noetl_cloud.spec.common import (
    CATALOG_PATH,
    LISTENER_NAME,
    POOL_NAME,
    ApiVersion,
    ByteCount,
    CatalogPath,
    Email,
    HeaderName,
    HttpUrl,
    JwksUrl,
    Metadata,
    PoolName,
    SpecModel,
    WalletAlias,
    raise_problems,
    rule,
)
from noetl_cloud.spec.downstreams import Downstreams, downstream_problems
from noetl_cloud.spec.spool import Spool

INGRESS_PREFIX = "/ingress/"
_GATEWAY_PATH = re.compile(rf"^{INGRESS_PREFIX}({LISTENER_NAME})$")

Source = Literal["pubsub", "nats", "kafka", "webhook"]
VerifyType = Literal["hmac_sha256", "github", "stripe", "standard_webhooks", "bearer", "pubsub_oidc", "none"]
Controls = Literal[
    "dispatch.playbook", "dispatch.execution_pool", "priority", "idempotency_key", "content_type", "schema_hint"
]

#: Verifiers that check a shared secret, resolved from the Wallet by alias.
SECRET_VERIFIERS = frozenset({"hmac_sha256", "github", "stripe", "standard_webhooks", "bearer"})
#: Verifiers whose replay key is the body digest and may be switched off (``verify.replay: none``).
DIGEST_REPLAY_VERIFIERS = frozenset({"hmac_sha256", "bearer"})
#: Verifiers that sign a timestamp: ``tolerance_s`` bounds their replay window.
TIMESTAMP_VERIFIERS = frozenset({"stripe", "standard_webhooks"})
#: Which sources can deliver in which mode: push is an HTTP delivery (Pub/Sub push, a webhook).
SOURCE_MODES: dict[str, frozenset[str]] = {
    "pubsub": frozenset({"pull", "push"}),
    "nats": frozenset({"pull"}),
    "kafka": frozenset({"pull"}),
    "webhook": frozenset({"push"}),
}
#: Controls whose values must come from ``allowed``, with the shape of a value.
ALLOWLIST_VALUES = {
    "dispatch.playbook": (CATALOG_PATH, "playbook path"),
    "dispatch.execution_pool": (POOL_NAME, "pool name"),
}
#: The addressing field a pull from each source cannot do without.
PULL_ADDRESS = {"pubsub": "subscription", "nats": "stream", "kafka": "topic"}


def _gateway_path(value: str) -> str:
    if not _GATEWAY_PATH.match(value):
        message = "gateway_path must be /ingress/<listener>, the listener matching [a-z0-9][a-z0-9_-]* (63 at most)"
        raise PydanticCustomError("gateway_path", message)
    return value


GatewayPath = Annotated[str, AfterValidator(_gateway_path)]


# -- ingress (Mode C, §6) ----------------------------------------------------------------------------


class Verify(SpecModel):
    """How the ingress verifies a push delivery before anything else of it is read (§6, §7.5).

    Secret-based verifiers name a Wallet alias in ``secret``; ``pubsub_oidc`` checks the Google-signed
    token against ``audience`` and ``service_account``. ``none`` is rejected for push.
    """

    type: VerifyType
    header: HeaderName | None = None
    secret: WalletAlias | None = None
    encoding: Literal["hex", "base64"] | None = None
    prefix: str | None = Field(default=None, max_length=64)
    tolerance_s: int | None = Field(default=None, ge=0, le=86_400)
    audience: str | None = Field(default=None, min_length=1, max_length=2048)
    service_account: Email | None = None
    jwks_url: JwksUrl | None = None
    # bearer only: read the token from this URL query parameter instead of a header, for push
    # sources that cannot send headers (Pub/Sub push without OIDC: ``https://.../ingress/x?token=...``).
    query_param: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    # Replay protection (docs/security.md): hmac_sha256 and bearer webhooks key a replay on the body
    # digest unless ``replay: none``; schemes without a signed timestamp keep it ``replay_window_s``.
    replay: Literal["body_digest", "none"] | None = None
    replay_window_s: int | None = Field(default=None, ge=1, le=7 * 86_400)


class RateLimit(SpecModel):
    """Per-listener token bucket at the ingress."""

    per_sec: float = Field(gt=0, le=1_000_000)
    burst: int | None = Field(default=None, ge=1, le=1_000_000)


class Ingress(SpecModel):
    """The push route of a listener on the ingress service."""

    gateway_path: GatewayPath | None = None
    verify: Verify | None = None
    max_body_bytes: ByteCount = Field(default=1024 * 1024, le=32 * 1024 * 1024)
    rate_limit: RateLimit | None = None


# -- runtime and dispatch (§4.2, §5, Phase 7) ----------------------------------------------------------


class Runtime(SpecModel):
    """Where a pull subscription's listener runs and how much it holds at once."""

    target: Literal["dedicated-pool", "cloud-run", "local"] = "dedicated-pool"
    pool: PoolName | None = None
    batch: int = Field(default=100, ge=1, le=10_000)
    max_in_flight: int = Field(default=1000, ge=1, le=1_000_000)
    timeout_ms: int = Field(default=10_000, ge=1, le=600_000)
    server_url: HttpUrl | None = None
    concurrency: int | None = Field(default=None, ge=1, le=1000)
    max_instances: int | None = Field(default=None, ge=1, le=1000)
    singleton: bool = False


class Dispatch(SpecModel):
    """The ordinary playbook each message runs, and on which execution pool."""

    playbook: CatalogPath
    payload_from: Literal["message.body", "message.json", "message.attributes"] = "message.json"
    execution_pool: PoolName | None = None
    batch_dispatch: bool = False
    batch_max: int = Field(default=100, ge=1, le=1000)


# -- header directives (§7) ----------------------------------------------------------------------------


class Directive(SpecModel):
    """One allowlisted header and what it controls. Routing controls need a value allowlist
    (``allowed``), ``priority`` a value-to-pool ``map``."""

    header: HeaderName
    controls: Controls
    allowed: list[str] | None = None
    map: dict[str, str] | None = None


class Trace(SpecModel):
    """W3C trace context propagation (§7.4); off unless ``propagate: w3c``."""

    propagate: Literal["w3c", "none"] = "none"
    baggage_allowlist: list[str] = Field(default_factory=list)


class Headers(SpecModel):
    """The header / attribute layer: only ``directives`` act as instructions, the rest is data."""

    normalize: bool = True
    directives: list[Directive] = Field(default_factory=list)
    trace: Trace = Field(default_factory=Trace)
    passthrough: Literal["data", "drop"] = "data"


# -- limits and dedup (Phase 7) -----------------------------------------------------------------------


class Limits(SpecModel):
    """Per-subscription backpressure: over the caps the runtime stops fetching (the source keeps the backlog)."""

    max_dispatch_per_sec: float | None = Field(default=None, gt=0, le=1_000_000)
    max_in_flight: int | None = Field(default=None, ge=1, le=1_000_000)


class Dedup(SpecModel):
    """The opt-in exactly-once window keyed by the idempotency key (else the message id)."""

    enabled: bool = False
    window_secs: int = Field(default=3600, ge=1, le=7 * 86_400)


# -- the document -------------------------------------------------------------------------------------


class SubscriptionSpec(SpecModel):
    """``spec`` of a Subscription. ``activation`` is ``continuous`` unless set for pull, and ``None`` for
    push (a push subscription is activated by its ingress route, not a runtime)."""

    source: Source
    mode: Literal["pull", "push"]
    activation: Literal["continuous", "scheduled"] | None = None
    cadence: str | None = Field(default=None, min_length=1, max_length=256)
    auth: WalletAlias | None = None
    subscription: str | None = Field(default=None, min_length=1, max_length=512)
    topic: str | None = Field(default=None, min_length=1, max_length=512)
    stream: str | None = Field(default=None, min_length=1, max_length=512)
    consumer: str | None = Field(default=None, min_length=1, max_length=512)
    group: str | None = Field(default=None, min_length=1, max_length=512)
    ingress: Ingress | None = None
    runtime: Runtime = Field(default_factory=Runtime)
    dispatch: Dispatch
    headers: Headers = Field(default_factory=Headers)
    spool: Spool = Field(default_factory=Spool)
    downstreams: Downstreams = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    dedup: Dedup = Field(default_factory=Dedup)
    scaling: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _activation(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if data.get("mode") == "push":
                data.pop("activation", None)  # ignored: the ingress route is the activation
            elif data.get("mode") == "pull" and data.get("activation") is None:
                data["activation"] = "continuous"
        return data

    @model_validator(mode="after")
    def _rules(self) -> SubscriptionSpec:
        problems = _source_problems(self) + _ingress_problems(self) + _cadence_problems(self)
        problems += _directive_problems(self.headers) + _spool_problems(self.spool)
        raise_problems("SubscriptionSpec", problems + downstream_problems(self.downstreams, self.spool.mode))
        return self


def _cadence_problems(spec: SubscriptionSpec) -> list[InitErrorDetails]:
    if spec.mode != "pull" or spec.activation != "scheduled":
        return []
    problem = cadence_problem(spec.cadence)
    return [] if problem is None else [rule(("cadence",), "cadence", problem)]


def _source_problems(spec: SubscriptionSpec) -> list[InitErrorDetails]:
    if spec.mode not in SOURCE_MODES[spec.source]:
        modes = " or ".join(sorted(SOURCE_MODES[spec.source]))
        return [rule(("mode",), "source_mode", f"a {spec.source} source is consumed in mode {modes}")]
    needed = PULL_ADDRESS.get(spec.source) if spec.mode == "pull" else None
    if needed and getattr(spec, needed) is None:
        return [rule((needed,), "missing", f"a {spec.source} pull names the {needed} to consume")]
    return []


def _ingress_problems(spec: SubscriptionSpec) -> list[InitErrorDetails]:
    ingress = spec.ingress
    if spec.mode == "pull":
        if ingress is None:
            return []
        return [rule(("ingress",), "not_applicable", "ingress applies to push subscriptions only")]
    problems: list[InitErrorDetails] = []
    if ingress is None or ingress.gateway_path is None:
        problems.append(rule(("ingress", "gateway_path"), "missing", "a push subscription needs ingress.gateway_path"))
    verify = ingress.verify if ingress else None
    if verify is None:
        problems.append(rule(("ingress", "verify"), "missing", "a push subscription must verify every delivery"))
        return problems
    at = ("ingress", "verify")
    if verify.type == "none":
        problems.append(rule((*at, "type"), "verify_required", "push ingress always verifies: type none is rejected"))
    elif verify.type in SECRET_VERIFIERS and verify.secret is None:
        problems.append(rule((*at, "secret"), "missing", f"{verify.type} needs secret, a Wallet alias"))
    elif verify.type == "pubsub_oidc":
        for name in ("audience", "service_account"):
            if getattr(verify, name) is None:
                problems.append(rule((*at, name), "missing", f"pubsub_oidc needs {name}"))
    return problems + _replay_problems(spec.source, verify)


def _replay_problems(source: str, verify: Verify) -> list[InitErrorDetails]:
    """``replay`` only where the body digest is the replay key; ``replay_window_s`` only where no
    signed timestamp sets the window (and where a window is kept at all)."""
    at = ("ingress", "verify")
    problems: list[InitErrorDetails] = []
    if verify.replay is not None and (source != "webhook" or verify.type not in DIGEST_REPLAY_VERIFIERS):
        message = (
            "replay applies to webhook listeners verified by hmac_sha256 or bearer (their replay key is the "
            f"body digest); a {source} {verify.type} delivery is kept from running twice by "
            + ("its messageId" if source == "pubsub" else "what its signature covers")
        )
        problems.append(rule((*at, "replay"), "replay_not_applicable", message))
    if verify.replay_window_s is not None:
        if verify.type in TIMESTAMP_VERIFIERS:
            message = f"{verify.type} signs a timestamp: tolerance_s bounds its replay window, not replay_window_s"
            problems.append(rule((*at, "replay_window_s"), "replay_window_not_applicable", message))
        elif verify.replay == "none":
            message = "replay: none keeps no replay window; drop replay_window_s or the opt-out"
            problems.append(rule((*at, "replay_window_s"), "replay_window_not_applicable", message))
    return problems


def _directive_problems(headers: Headers) -> list[InitErrorDetails]:
    problems: list[InitErrorDetails] = []
    first_use: dict[str, int] = {}
    for index, directive in enumerate(headers.directives):
        at = ("headers", "directives", index)
        if directive.header in first_use:
            message = f"header is already a directive at headers.directives.{first_use[directive.header]}"
            problems.append(rule((*at, "header"), "duplicate_header", message))
        else:
            first_use[directive.header] = index
        if directive.controls in ALLOWLIST_VALUES:
            pattern, what = ALLOWLIST_VALUES[directive.controls]
            if not directive.allowed:
                message = f"{directive.controls} needs a non-empty allowed list: a header never picks any target"
                problems.append(rule((*at, "allowed"), "allowlist_required", message))
            problems.extend(
                rule((*at, "allowed", position), "invalid_target", f"not a valid {what}")
                for position, value in enumerate(directive.allowed or [])
                if not re.match(pattern, value)
            )
        elif directive.controls == "priority":
            if not directive.map:
                message = "priority needs a non-empty map from header value to pool"
                problems.append(rule((*at, "map"), "map_required", message))
            problems.extend(
                rule((*at, "map", key), "invalid_target", "not a valid pool name")
                for key, pool in (directive.map or {}).items()
                if not re.match(POOL_NAME, pool)
            )
    return problems


def _spool_problems(spool: Spool) -> list[InitErrorDetails]:
    problems: list[InitErrorDetails] = []
    if spool.mode != "off" and spool.backend is None:
        problems.append(rule(("spool", "backend"), "missing", f"spool mode {spool.mode} needs a backend"))
    if spool.ordering == "per_key" and spool.ordering_key is None:
        problems.append(rule(("spool", "ordering_key"), "missing", "per_key ordering needs an ordering_key"))
    if spool.drain.on_recovery == "interleave" and spool.ordering == "global":
        message = "interleave breaks global order: use ordered_then_live, or per_key / none ordering"
        problems.append(rule(("spool", "drain", "on_recovery"), "ordering_conflict", message))
    return problems


class SubscriptionDoc(SpecModel):
    """A ``kind: Subscription`` catalog document."""

    apiVersion: ApiVersion = "noetl.io/v1"
    kind: Literal["Subscription"]
    metadata: Metadata
    spec: SubscriptionSpec

    @property
    def path(self) -> str:
        """The catalog path: ``metadata.path``, falling back to ``metadata.name``."""
        return self.metadata.catalog_path

    def listener(self) -> str | None:
        """The listener name of a push route (the segment after ``/ingress/``); ``None`` without one."""
        ingress = self.spec.ingress
        if ingress is None or ingress.gateway_path is None:
            return None
        return ingress.gateway_path.removeprefix(INGRESS_PREFIX)

    def route_targets(self) -> list[str]:
        """Every playbook a message may run: the default, then each ``dispatch.playbook`` allowlist."""
        targets = [self.spec.dispatch.playbook]
        for directive in self.spec.headers.directives:
            if directive.controls == "dispatch.playbook":
                targets.extend(directive.allowed or [])
        return list(dict.fromkeys(targets))

    def pool_targets(self) -> list[str]:
        """Every execution pool a message may land on: the default (if set), each
        ``dispatch.execution_pool`` allowlist, then each pool of a ``priority`` map."""
        directives = self.spec.headers.directives
        pools = [self.spec.dispatch.execution_pool] if self.spec.dispatch.execution_pool else []
        pools.extend(pool for d in directives if d.controls == "dispatch.execution_pool" for pool in d.allowed or [])
        pools.extend(pool for d in directives if d.controls == "priority" for pool in (d.map or {}).values())
        return list(dict.fromkeys(pools))
