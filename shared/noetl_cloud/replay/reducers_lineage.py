"""What any event may carry besides its type's change: a business object's state and payload references.

* ``business_objects`` — any event whose payload or meta carries
  ``business_object: {type, id, op?: upsert|delete, state?: {...}}``: the object's merged state;
* ``payload_refs`` (the lineage) — the envelope's ``payload_ref`` and an inline result ``reference``.

Pure, like every reducer (:mod:`~noetl_cloud.replay.reducers`): the state and one event in, the state changed.
"""

from __future__ import annotations

from typing import Any

from noetl_cloud.replay.state import ReplayState
from noetl_cloud.replay.upcasters import Event


def business_object(state: ReplayState, event: Event, business: dict[str, Any]) -> None:
    kind, oid = business.get("type"), business.get("id")
    if not isinstance(kind, str) or oid is None:
        return
    key = f"{kind}/{oid}"
    rows = state.surfaces["business_objects"]
    row = rows.get(key)
    if row is None:
        row = rows[key] = {
            "id": key,
            "type": kind,
            "object_id": str(oid),
            "version": 0,
            "state": {},
            "deleted": False,
            "first_event_id": str(event["event_id"]),
            "last_event_id": None,
        }
    row["version"] += 1
    row["last_event_id"] = str(event["event_id"])
    if business.get("op") == "delete":
        row.update(state={}, deleted=True)
        return
    fields = business.get("state")
    row.update(state={**row["state"], **fields} if isinstance(fields, dict) else row["state"], deleted=False)


def lineage(state: ReplayState, event: Event, payload: dict[str, Any]) -> None:
    """Record the payload references an event carries: the envelope's ``payload_ref`` and an inline
    result ``reference`` (data-plane reference-first)."""
    ref = event.get("payload_ref")
    if isinstance(ref, dict) and ref.get("uri"):
        _reference(state, event, ref["uri"], ref.get("sha256"), ref.get("size_bytes"), ref.get("media_type"))
    inline = payload.get("reference")
    if isinstance(inline, dict) and inline.get("ref"):
        _reference(state, event, inline["ref"], inline.get("checksum"), inline.get("size"), inline.get("kind"))


def _reference(state: ReplayState, event: Event, uri: Any, sha: Any, size: Any, media: Any) -> None:
    key = str(uri)
    if key not in state.payload_refs:
        state.payload_refs[key] = {
            "uri": key,
            "sha256": sha,
            "size_bytes": size,
            "media_type": media,
            "first_event_id": str(event["event_id"]),
        }
