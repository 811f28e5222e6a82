"""Who may call what: the caller roles and, per service, the roles each internal route admits.

Authentication (:mod:`noetl_cloud.auth.internal`) proves who called and maps that caller to one or
more **caller roles**: a bearer token of a purpose locally (``NOETL_INTERNAL_API_TOKEN_DIGESTS``),
a service account email in the cloud (``NOETL_INTERNAL_API_CALLERS``, ``<role>=<email>`` entries).
Authorization is this module's :data:`POLICY`, the one place that says which roles may call each
route of each service: keyed by ``(method, rule)``, the rule exactly as the route declares it.

Deny by default: a route under an authenticated prefix with no entry here is refused to every
caller (403 ``forbidden_role``), so a new route is unreachable until someone decides who may call
it; ``tests/unit/test_roles.py`` fails for every registered route of every app without an entry.
The check per request is one dict lookup and one set intersection, no round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from noetl_cloud.errors import Forbidden

#: The people and tools operating the deployment: the CLI, the console, replay verification.
OPERATOR = "operator"
#: The public ingress: reads its listeners' configuration, records verdicts, starts their executions.
INGRESS = "ingress"
#: Runs commands: claims, heartbeats and reports them; starts and follows child playbooks; frames.
WORKER = "worker"
#: Replays spooled deliveries.
SPOOL_DRAINER = "spool_drainer"
#: A pull subscription's runtime: its subscription's lifecycle, its executions, its events.
SUBSCRIPTION_RUNTIME = "subscription_runtime"
#: The maintenance jobs (Cloud Scheduler, locally ``noetl_cloud.maintenance.scheduler``).
SCHEDULER = "scheduler"
#: Cloud Build's post-rollout smoke test (reads the catalog).
DEPLOYER = "deployer"
#: The Pub/Sub push identity: only ever authenticated by a push endpoint's own credentials.
PUSH = "pubsub_push"

#: The roles a caller can be mapped to by settings (``NOETL_INTERNAL_API_CALLERS``, the token digests).
CALLER_ROLES: frozenset[str] = frozenset(
    {OPERATOR, INGRESS, WORKER, SPOOL_DRAINER, SUBSCRIPTION_RUNTIME, SCHEDULER, DEPLOYER}
)
#: What a single shared token holds when a process is configured with one token and no per-purpose
#: digests (test harnesses, ``local/docker-compose.yml``): every caller role. ``noetl-cloud local up``
#: and Terraform never configure it.
EVERY_ROLE = CALLER_ROLES


def _roles(*names: str) -> frozenset[str]:
    return frozenset(names)


_ANY = CALLER_ROLES | {PUSH}  # documentation only: the role's OpenAPI document
_OPS = _roles(OPERATOR)
_MAINTENANCE = _roles(SCHEDULER, OPERATOR)
_OPENAPI = ("GET", "/api/openapi.json")

Route = tuple[str, str]

#: Per service (the ``create_app`` role name): ``(method, rule)`` → the caller roles admitted.
#: Terraform grants each service's ``run.invoker`` to exactly the roles its routes admit here
#: (``local.service_callers`` of infra/modules/iam/main.tf; tests/unit/test_roles.py compares them).
POLICY: dict[str, dict[Route, frozenset[str]]] = {
    "execute": {
        _OPENAPI: _ANY,
        # catalog
        ("POST", "/api/catalog"): _OPS,
        ("GET", "/api/catalog"): _roles(OPERATOR, DEPLOYER),
        ("GET", "/api/catalog/<path:path>"): _roles(OPERATOR, DEPLOYER, SPOOL_DRAINER, SUBSCRIPTION_RUNTIME),
        # executions: started by every role that forwards deliveries, by the scheduler's scheduled
        # subscriptions, by a worker's child playbook; read and managed by operators
        ("POST", "/api/execute"): _roles(OPERATOR, INGRESS, WORKER, SPOOL_DRAINER, SUBSCRIPTION_RUNTIME, SCHEDULER),
        ("POST", "/api/execute/batch"): _roles(OPERATOR, SUBSCRIPTION_RUNTIME),
        ("POST", "/api/executions/<int:execution_id>/cancel"): _OPS,
        ("GET", "/api/executions"): _OPS,
        ("GET", "/api/executions/<int:execution_id>"): _roles(OPERATOR, WORKER),  # a worker follows its child
        ("POST", "/api/executions/<int:execution_id>/rerun"): _OPS,
        ("POST", "/api/executions/reruns"): _OPS,
        ("GET", "/api/executions/reruns/<operation_id>"): _OPS,
        ("GET", "/api/executions/<int:execution_id>/payloads/<digest>"): _OPS,
        ("GET", "/api/executions/<int:execution_id>/events"): _OPS,
        # distributed execution: the worker's own routes
        ("GET", "/api/commands/<int:command_id>"): _roles(WORKER),
        ("POST", "/api/commands/<int:command_id>/claim"): _roles(WORKER),
        ("POST", "/api/commands/<int:command_id>/heartbeat"): _roles(WORKER),
        ("POST", "/api/events"): _roles(WORKER),
        # subscriptions
        ("POST", "/api/subscriptions/register"): _roles(OPERATOR, SUBSCRIPTION_RUNTIME),
        ("POST", "/api/subscriptions/<int:subscription_id>/<action>"): _roles(OPERATOR, SUBSCRIPTION_RUNTIME),
        ("GET", "/api/subscriptions"): _roles(OPERATOR, SPOOL_DRAINER),
        ("GET", "/api/subscriptions/<int:subscription_id>"): _roles(OPERATOR, SUBSCRIPTION_RUNTIME),
        # the ingress's own: listener configuration carries resolved secrets
        ("GET", "/api/internal/ingress/<listener:listener>"): _roles(INGRESS),
        ("POST", "/api/internal/ingress/<listener:listener>/audit"): _roles(INGRESS),
        ("POST", "/api/internal/spool/events"): _roles(INGRESS, SPOOL_DRAINER, SUBSCRIPTION_RUNTIME),
        ("POST", "/api/internal/subscriptions/<int:subscription_id>/events"): _roles(SUBSCRIPTION_RUNTIME),
        # maintenance
        ("POST", "/api/internal/reaper"): _MAINTENANCE,
        ("POST", "/api/internal/retention"): _MAINTENANCE,
        ("POST", "/api/internal/outbox/sweep"): _MAINTENANCE,
        # scheduled subscriptions: the tick runs what is due; the schedule report is the scheduler's status
        ("POST", "/api/internal/subscriptions/tick"): _MAINTENANCE,
        ("GET", "/api/internal/subscriptions/schedule"): _MAINTENANCE,
        ("GET", "/api/internal/outbox/relay"): _OPS,
        # reading for operators: replay, traces, the console
        ("GET", "/api/replay/state"): _OPS,
        ("GET", "/api/replay/verify"): _OPS,
        ("GET", "/api/traces/<trace_id>"): _OPS,
        # the spool and its dead letters, forwarded to the spool drainer (the console's spool page)
        ("GET", "/api/spool/<path:rest>"): _OPS,
        ("POST", "/api/spool/<path:rest>"): _OPS,
        ("GET", "/console"): _OPS,
        ("GET", "/console/"): _OPS,
        ("GET", "/console/<path:name>"): _OPS,
    },
    "frames": {
        _OPENAPI: _ANY,
        ("POST", "/api/stages/<int:stage_id>/frames/claim"): _roles(WORKER),
        ("GET", "/api/stages/<int:stage_id>"): _roles(WORKER),
        ("POST", "/api/frames/<int:frame_id>/heartbeat"): _roles(WORKER),
        ("POST", "/api/frames/<int:frame_id>/commit"): _roles(WORKER),
        ("POST", "/api/stages/<int:stage_id>/frames/commit"): _roles(WORKER),
        ("POST", "/api/internal/frames/reap"): _roles(SCHEDULER),
    },
    "projector": {
        _OPENAPI: _ANY,
        ("GET", "/api/projector/status"): _OPS,
        ("POST", "/api/internal/projector/catch-up"): _MAINTENANCE,
        ("GET", "/api/replay/state"): _OPS,
        ("GET", "/api/replay/verify"): _OPS,
    },
    "spool_drainer": {
        _OPENAPI: _ANY,
        # the schedule; whoever closes a circuit or spools while a probe is due; an operator's resume
        ("POST", "/drain"): _roles(SCHEDULER, INGRESS, SUBSCRIPTION_RUNTIME, SPOOL_DRAINER, OPERATOR),
        # operators: the spool, its dead letters and their resend (directly, or forwarded by the control plane)
        ("GET", "/api/spool/subscriptions"): _OPS,
        ("GET", "/api/spool/dead-letters"): _OPS,
        ("POST", "/api/spool/dead-letters/resend"): _OPS,
        ("POST", "/api/spool/resends"): _OPS,
        ("GET", "/api/spool/resends/<operation_id>"): _OPS,
        ("POST", "/api/spool/drain"): _OPS,
    },
    # The worker's /api/ is its OpenAPI document, behind the push credentials; POST / checks them itself.
    "worker": {_OPENAPI: _ANY},
    # Public: the ingress authenticates no internal caller (its deliveries are verified per listener);
    # the runtime serves only its health and its document.
    "ingress": {_OPENAPI: _ANY},
    "subscription_runtime": {_OPENAPI: _ANY},
}


class ForbiddenRole(Forbidden):
    """An authenticated caller whose roles this route does not admit."""

    code = "forbidden_role"


def policy_for(service: str) -> Mapping[Route, frozenset[str]]:
    """The routes of ``service`` and the roles each admits (empty for an unknown service: deny all)."""
    return POLICY.get(service, {})


def authorize(policy: Mapping[Route, frozenset[str]], method: str, rule: str, roles: frozenset[str]) -> None:
    """Raise :class:`ForbiddenRole` unless one of ``roles`` may call ``method rule``; HEAD is GET."""
    allowed = policy.get(("GET" if method == "HEAD" else method, rule))
    if allowed is None or roles.isdisjoint(allowed):
        raise ForbiddenRole(
            "the caller's role may not call this route",
            details={
                "route": f"{method} {rule}",
                "caller_roles": sorted(roles),
                "allowed_roles": sorted(allowed or ()),
            },
        )


def parse_role_entries(entries: Iterable[str], *, value: str) -> dict[str, frozenset[str]]:
    """``<role>=<value>`` entries as ``{value: roles}`` (a value may hold several roles).

    Raises ``ValueError`` naming the entry when it has no ``=``, an unknown role, or an empty value."""
    mapped: dict[str, set[str]] = {}
    known = ", ".join(sorted(CALLER_ROLES))
    for entry in entries:
        role, sep, item = entry.partition("=")
        role, item = role.strip(), item.strip()
        if not sep or not item:
            raise ValueError(f"entry {entry!r} must be <role>=<{value}> (roles: {known})")
        if role not in CALLER_ROLES:
            raise ValueError(f"entry {entry!r} names an unknown role {role!r} (roles: {known})")
        mapped.setdefault(item, set()).add(role)
    return {item: frozenset(roles) for item, roles in mapped.items()}


__all__ = [
    "CALLER_ROLES",
    "DEPLOYER",
    "EVERY_ROLE",
    "INGRESS",
    "OPERATOR",
    "POLICY",
    "PUSH",
    "SCHEDULER",
    "SPOOL_DRAINER",
    "SUBSCRIPTION_RUNTIME",
    "WORKER",
    "ForbiddenRole",
    "authorize",
    "parse_role_entries",
    "policy_for",
]
