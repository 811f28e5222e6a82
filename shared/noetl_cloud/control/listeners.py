"""Listener configuration for the ingress role: ``GET /api/internal/ingress/{listener}``.

The push configuration of the subscription bound to ``/ingress/<listener>``, with its verify
secret resolved through the wallet. Only the ingress role reads it; the response is never logged.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from noetl_cloud.control.catalog import CatalogService
from noetl_cloud.control.lifecycle import SubscriptionService
from noetl_cloud.envelope import EventFactory
from noetl_cloud.errors import NotFound, Unavailable
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.secrets.port import SecretNotFound, SecretResolver
from noetl_cloud.spec.common import LISTENER_NAME

LISTENER = re.compile(rf"^{LISTENER_NAME}$")  # exactly the names a subscription can register


AUDIT_TYPES = ("subscription.message.rejected", "subscription.message.dead_lettered")


class ListenerService:
    def __init__(
        self,
        catalog: CatalogService,
        subscriptions: SubscriptionService,
        secrets: SecretResolver,
        store: PostgresEventStore,
        events: EventFactory,
    ) -> None:
        self.catalog = catalog
        self.subscriptions = subscriptions
        self.secrets = secrets
        self.store = store
        self.events = events

    def audit(self, listener: str, event_type: str, payload: dict[str, Any]) -> str:
        """Record an ingress verdict that has no execution (a rejection, a dead letter); its id."""
        if not LISTENER.match(listener):
            raise NotFound(f"unknown listener {listener!r}", code="unknown_listener")
        stream = f"listener/{listener}"
        (event,) = self.store.append(
            stream,
            [
                self.events.new(
                    event_type,
                    stream_id=stream,
                    aggregate_type="listener",
                    aggregate_id=listener,
                    payload={**payload, "listener": listener},
                )
            ],
        )
        return event.event_id

    def config(self, listener: str) -> dict[str, Any]:
        if not LISTENER.match(listener):
            raise NotFound(f"unknown listener {listener!r}", code="unknown_listener")
        entry = self.catalog.subscription_for_listener(f"/ingress/{listener}")
        spec = copy.deepcopy(entry.document.get("spec", {}))
        verify = dict((spec.get("ingress") or {}).get("verify") or {})
        alias = verify.pop("secret", None)
        if alias:
            try:
                verify["secret"] = self.secrets.resolve(alias)
            except SecretNotFound as exc:
                # The subscription names a secret the wallet does not hold: the listener cannot
                # verify anything, so it must not accept anything (the source retries).
                raise Unavailable(
                    f"listener {listener!r} cannot verify deliveries: {exc.message}", code="listener_secret_missing"
                ) from None
            verify["secret_alias"] = alias
        live = self.subscriptions.live_for_path(entry.path)
        ingress = spec.get("ingress") or {}
        return {
            "listener": listener,
            "path": entry.path,
            "catalog_id": entry.catalog_id,
            "version": entry.version,
            "subscription_id": live["subscription_id"] if live else None,
            "state": live["state"] if live else "unregistered",
            "source": spec.get("source"),
            "verify": verify,
            "max_body_bytes": ingress.get("max_body_bytes"),
            "rate_limit": ingress.get("rate_limit"),
            "dispatch": spec.get("dispatch"),
            "headers": spec.get("headers"),
            "spool": spec.get("spool"),
            "downstreams": spec.get("downstreams") or [],
            "limits": spec.get("limits"),
            "dedup": spec.get("dedup"),
        }
