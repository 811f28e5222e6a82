"""From a pulled message to an execute request (pure: data in, data out).

The metadata channel is normalized into ``message.headers`` (RFC §7.1) and the raw map kept as
``message.attributes``; the channel of a pull subscription is authenticated by the source, so its
headers are sealed as trusted (:func:`~noetl_cloud.ingress.directives.seal_trusted_pull`) and the
directive engine of the ingress plans the dispatch under the same allowlist (§7.2, §7.5). The
workload has the shape a push delivery gives the playbook (``{payload, message}``), so a playbook
does not care how its message arrived.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_cloud import jsonsafe
from noetl_cloud.ingress.directives import DispatchPlan, normalize_headers, plan_dispatch, seal_trusted_pull
from noetl_cloud.ingress.push import BadMessage, PushMessage
from noetl_cloud.runtime.port import SourceMessage


def decode_payload(data: bytes, payload_from: str, attributes: Mapping[str, str]) -> Any:
    """The body a playbook receives: JSON (``message.json``, else :class:`BadMessage`), the
    attributes, or text (JSON when it parses; base64 when it is not UTF-8)."""
    if payload_from == "message.attributes":
        return dict(attributes)
    if payload_from == "message.json":
        try:
            return jsonsafe.loads(data, max_depth=jsonsafe.MAX_PAYLOAD_DEPTH)
        except (UnicodeDecodeError, ValueError):
            raise BadMessage(
                f"the message data is not JSON (nested at most {jsonsafe.MAX_PAYLOAD_DEPTH} levels), "
                "and the subscription takes message.json"
            ) from None
    try:
        return jsonsafe.loads(data, max_depth=jsonsafe.MAX_PAYLOAD_DEPTH)
    except (UnicodeDecodeError, ValueError):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(data).decode("ascii")


def normalize(message: SourceMessage, source: str, payload_from: str) -> PushMessage:
    """The message as the directive engine and the playbook see it; :class:`BadMessage` when its
    payload can never be what the subscription takes."""
    headers = normalize_headers(message.header_pairs)
    attributes = message.attributes
    return PushMessage(
        message=seal_trusted_pull(message.message_id, source, headers),
        payload=decode_payload(message.data, payload_from, attributes),
        attributes=attributes,
        publish_time=message.publish_time,
        ordering_key=message.ordering_key,
        delivery_attempt=message.delivery_attempt,
    )


@dataclass(frozen=True)
class Prepared:
    """One message ready to dispatch: the execute request, and what a spool replay needs."""

    message: PushMessage
    plan: DispatchPlan
    request: dict[str, Any]

    def spool_plan(self) -> dict[str, Any]:
        """The verified plan plus the request around the workload (the spool item's ``plan``)."""
        return {**self.plan.to_dict(), "request": {k: v for k, v in self.request.items() if k != "workload"}}


def prepare(message: SourceMessage, config: Mapping[str, Any], *, subscription_id: str | None, path: str) -> Prepared:
    """Normalize, plan and build the execute request of one message under a subscription's
    ``spec`` (as a mapping). Raises :class:`BadMessage` for a payload that can never succeed."""
    source = str(config.get("source") or "pubsub")
    payload_from = str((config.get("dispatch") or {}).get("payload_from") or "message.json")
    pushed = normalize(message, source, payload_from)
    plan = plan_dispatch(pushed.message, config)
    meta: dict[str, Any] = {
        "message_id": message.message_id,
        "source": source,
        "subscription_path": path,
        "principal": pushed.message.principal,
    }
    if message.publish_time:  # with the id, what tells a redelivery from a new message given an old id
        meta["publish_time"] = message.publish_time
    if message.delivery_attempt:
        meta["delivery_attempt"] = message.delivery_attempt
    if plan.applied or plan.ignored:
        meta["directives"] = plan.audit(message.message_id)
    for hint in ("content_type", "schema_hint"):
        if getattr(plan, hint):
            meta[hint] = getattr(plan, hint)
    request: dict[str, Any] = {"path": plan.playbook, "workload": pushed.workload(), "meta": meta}
    if plan.execution_pool:
        request["execution_pool"] = plan.execution_pool
    if plan.trace and plan.trace.get("traceparent"):
        request["trace"] = plan.trace
    if subscription_id:
        request["parent_execution_id"] = subscription_id
    if plan.dedup:
        request["dedup"] = plan.dedup
    return Prepared(pushed, plan, request)
