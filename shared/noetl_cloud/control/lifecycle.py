"""Subscription lifecycle: register -> activate -> pause / resume -> drain -> deactivate.

Every transition is a compare-and-set on the subscription row's ``version`` and the append of its
event to the stream ``subscription/<id>`` at the same expected version, in one transaction: two
callers racing on one subscription cannot both move it, and the event trail is exactly the
sequence of states it went through. A transition that the current state does not allow is a
409 carrying the current state.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, and_, func, select

from noetl_cloud.control.catalog import CatalogService
from noetl_cloud.db.schema import subscription
from noetl_cloud.envelope import EventFactory
from noetl_cloud.errors import Conflict, NotFound, ValidationFailed
from noetl_cloud.eventlog.port import StreamVersionConflict
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.ids import SnowflakeGenerator

# action -> (states it may start from, state it leads to, event type)
TRANSITIONS: dict[str, tuple[frozenset[str], str, str]] = {
    "activate": (frozenset({"registered"}), "active", "subscription.activated"),
    "pause": (frozenset({"active"}), "paused", "subscription.paused"),
    "resume": (frozenset({"paused"}), "active", "subscription.resumed"),
    "drain": (frozenset({"active", "paused"}), "draining", "subscription.draining"),
    "deactivate": (
        frozenset({"registered", "active", "paused", "draining"}),
        "deactivated",
        "subscription.deactivated",
    ),
}


class InvalidTransition(Conflict):
    code = "invalid_transition"


def _view(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {
        "subscription_id": str(m["subscription_id"]),
        "path": m["path"],
        "catalog_id": str(m["catalog_id"]),
        "state": m["state"],
        "version": m["version"],
        "created_at": m["created_at"].isoformat(),
        "updated_at": m["updated_at"].isoformat(),
    }


class SubscriptionService:
    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        catalog_service: CatalogService,
        ids: SnowflakeGenerator,
        events: EventFactory,
    ) -> None:
        self.engine = engine
        self.store = store
        self.catalog = catalog_service
        self.ids = ids
        self.events = events

    def _scope(self) -> Any:
        return and_(
            subscription.c.tenant_id == self.events.tenant_id,
            subscription.c.organization_id == self.events.organization_id,
        )

    def register(self, path: str) -> tuple[dict[str, Any], bool]:
        """Register the latest version of a subscription; a live one of that path is reused."""
        entry = self.catalog.get(path)
        if entry.kind != "Subscription":
            raise ValidationFailed(f"{path} is a {entry.kind}, not a Subscription", code="not_a_subscription")
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            live = conn.execute(
                select(subscription).where(
                    self._scope(), subscription.c.path == path, subscription.c.state != "deactivated"
                )
            ).first()
            if live is not None:
                return _view(live), False
            subscription_id = self.ids.next_id()
            row = conn.execute(
                subscription.insert()
                .values(
                    subscription_id=subscription_id,
                    tenant_id=self.events.tenant_id,
                    organization_id=self.events.organization_id,
                    catalog_id=int(entry.catalog_id),
                    path=path,
                    state="registered",
                    version=1,
                )
                .returning(*subscription.c)
            ).one()
            stream = f"subscription/{subscription_id}"
            self.store.append_in(
                conn,
                stream,
                [
                    self.events.new(
                        "subscription.registered",
                        stream_id=stream,
                        aggregate_type="subscription",
                        aggregate_id=str(subscription_id),
                        payload={
                            "path": path,
                            "catalog_id": entry.catalog_id,
                            "version": entry.version,
                            "to_state": "registered",
                        },
                    )
                ],
                expected_version=0,
                outbox=rows,
            )
        self.store.hand_off(rows)
        return _view(row), True

    def transition(self, subscription_id: int, action: str, expected_version: int | None = None) -> dict[str, Any]:
        if action not in TRANSITIONS:
            raise NotFound(f"unknown lifecycle action {action!r}", code="unknown_action")
        allowed, target, event_type = TRANSITIONS[action]
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            row = conn.execute(
                select(subscription).where(self._scope(), subscription.c.subscription_id == subscription_id)
            ).first()
            if row is None:
                raise NotFound(f"no subscription {subscription_id}", code="subscription_not_found")
            current, version = row.state, row.version
            if expected_version is not None and expected_version != version:
                raise Conflict(
                    f"subscription {subscription_id} is at version {version}, not {expected_version}",
                    code="version_conflict",
                    details={"state": current, "version": version},
                )
            if current not in allowed:
                raise InvalidTransition(
                    f"cannot {action} a subscription that is {current}",
                    details={"state": current, "version": version, "allowed_from": sorted(allowed)},
                )
            moved = conn.execute(
                subscription.update()
                .where(subscription.c.subscription_id == subscription_id, subscription.c.version == version)
                .values(state=target, version=version + 1, updated_at=func.now())
                .returning(*subscription.c)
            ).first()
            if moved is None:  # another caller moved it between our read and our write
                raise self._lost_race(subscription_id, action)
            stream = f"subscription/{subscription_id}"
            try:
                self.store.append_in(
                    conn,
                    stream,
                    [
                        self.events.new(
                            event_type,
                            stream_id=stream,
                            aggregate_type="subscription",
                            aggregate_id=str(subscription_id),
                            payload={"path": row.path, "from_state": current, "to_state": target},
                        )
                    ],
                    expected_version=version,
                    outbox=rows,
                )
            except StreamVersionConflict:
                raise self._lost_race(subscription_id, action) from None
        self.store.hand_off(rows)
        return _view(moved)

    def _lost_race(self, subscription_id: int, action: str) -> Conflict:
        latest = self.get(subscription_id)
        return InvalidTransition(
            f"subscription {subscription_id} changed while it was being moved ({action}); it is {latest['state']}",
            code="concurrent_transition",
            details={"state": latest["state"], "version": latest["version"]},
        )

    def get(self, subscription_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(subscription).where(self._scope(), subscription.c.subscription_id == subscription_id)
            ).first()
        if row is None:
            raise NotFound(f"no subscription {subscription_id}", code="subscription_not_found")
        return _view(row)

    def list(self, state: str | None = None) -> list[dict[str, Any]]:
        query = select(subscription).where(self._scope()).order_by(subscription.c.created_at)
        if state:
            query = query.where(subscription.c.state == state)
        with self.engine.connect() as conn:
            return [_view(r) for r in conn.execute(query)]

    def live_for_path(self, path: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(subscription).where(
                    self._scope(), subscription.c.path == path, subscription.c.state != "deactivated"
                )
            ).first()
        return None if row is None else _view(row)
