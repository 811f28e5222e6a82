"""The replay API: ``GET /api/replay/state`` and ``GET /api/replay/verify`` (a Flask blueprint).

``tenant_id`` and ``organization_id`` are required and scope every read: an execution of another
tenant is answered exactly like one that does not exist (404 ``execution_not_found``). The state
needs exactly one cutoff — ``as_of_event_id``, ``as_of_position`` or ``as_of_time`` — else 400
``invalid_cutoff``; ``projection`` (default ``all``) selects the surfaces returned and
checksummed; ``resolve_payloads=true`` adds a bounded summary of the payload references.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, request

from noetl_cloud.envelope import parse_time
from noetl_cloud.errors import BadRequest
from noetl_cloud.ids import id_from_text
from noetl_cloud.replay.service import Cutoff, ReplayService
from noetl_cloud.replay.state import SURFACES

#: ``projection=`` values: the surface names, the spec's singular forms, and ``all``.
ALIASES = {
    **{name: (name,) for name in SURFACES},
    "stage": ("stages",),
    "frame": ("frames",),
    "command": ("commands",),
    "loop": ("loops",),
    "business_object": ("business_objects",),
    "all": SURFACES,
}
_ID = r"^[0-9]{1,19}$"
_MAX_SCOPE = 128


def _required(name: str) -> str:
    value = request.args.get(name, "")
    if not value:
        raise BadRequest(f"{name} is required", code="missing_parameter", details={"parameter": name})
    if len(value) > _MAX_SCOPE:
        raise BadRequest(f"{name} is too long", code="invalid_parameter", details={"parameter": name})
    return value


def _id(name: str, value: str) -> int:
    number = id_from_text(value)
    if number is None:
        raise BadRequest(f"{name} must be a decimal id", code="invalid_parameter", details={"parameter": name})
    return number


def scope() -> tuple[str, str, str]:
    tenant = _required("tenant_id")
    org = _required("organization_id")
    execution_id = str(_id("execution_id", _required("execution_id")))
    return tenant, org, execution_id


def parse_cutoff(args: Any) -> Cutoff:
    given = [name for name in ("as_of_event_id", "as_of_position", "as_of_time") if args.get(name, "") != ""]
    if len(given) != 1:
        raise BadRequest(
            "exactly one of as_of_event_id, as_of_position, as_of_time is required",
            code="invalid_cutoff",
            details={"given": given},
        )
    name = given[0]
    value = args[name]
    if name == "as_of_event_id":
        return Cutoff(event_id=_id(name, value))
    if name == "as_of_position":
        return Cutoff(position=_id(name, value))
    try:
        return Cutoff(time=parse_time(value))
    except ValueError:
        raise BadRequest(
            "as_of_time must be an ISO 8601 time with a zone", code="invalid_parameter", details={"parameter": name}
        ) from None


def parse_projection(value: str | None) -> tuple[str, ...]:
    surfaces = ALIASES.get(value or "all")
    if surfaces is None:
        raise BadRequest(
            f"projection must be one of {', '.join(ALIASES)}", code="invalid_projection", details={"given": value}
        )
    return surfaces


def _flag(name: str) -> bool:
    value = request.args.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise BadRequest(f"{name} must be true or false", code="invalid_parameter", details={"parameter": name})
    return value in ("true", "1")


def blueprint(service: Callable[[], ReplayService]) -> Blueprint:
    """The routes, over a lazily built :class:`ReplayService` (``service()`` returns it)."""
    bp = Blueprint("replay", __name__)

    @bp.get("/api/replay/state")
    def replay_state() -> dict[str, Any]:
        tenant, org, execution_id = scope()
        cutoff = parse_cutoff(request.args)
        surfaces = parse_projection(request.args.get("projection"))
        return service().state(
            tenant, org, execution_id, cutoff, surfaces=surfaces, resolve_payloads=_flag("resolve_payloads")
        )

    @bp.get("/api/replay/verify")
    def replay_verify() -> dict[str, Any]:
        tenant, org, execution_id = scope()
        return service().verify(tenant, org, execution_id)

    return bp
