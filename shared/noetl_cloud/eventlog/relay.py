"""The outbox relay: publishes outbox rows after their transaction committed.

Two kinds of rows: command notifications (``noetl-commands-<pool>``) and the mirror of every
event (``noetl-events``, ordering key = execution id, attributes ``event_type``, ``tenant_id``,
``organization_id``). A writer hands the rows it just committed to :meth:`OutboxRelay.publish_rows`;
rows whose publish fails stay ``pending`` with an exponential back-off (2, 4, ... 256 s, at most
300 s), and :meth:`OutboxRelay.sweep` (a scheduled endpoint) publishes whatever a crashed or failed
writer left on both kinds of topic: rows still ``pending`` after a grace period, and rows stuck
``in_flight`` past their lease. A message may so be published twice (a crash between publish and
mark); every consumer is idempotent (claims, dedup, the projector's tracking position).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, TextClause, text

from noetl_cloud.envelope import canonical_json
from noetl_cloud.messaging.port import OutboundMessage, Publisher


@dataclass(frozen=True, slots=True)
class OutboxRow:
    outbox_id: int
    topic: str
    data: dict[str, Any]
    attributes: dict[str, str]
    ordering_key: str | None = None

    def message(self) -> OutboundMessage:
        return OutboundMessage(
            topic=self.topic,
            data=canonical_json(self.data).encode(),
            attributes=self.attributes,
            ordering_key=self.ordering_key,
        )


_MARK_PUBLISHED = text(
    "UPDATE outbox SET status = 'published', published_at = now(), attempts = attempts + 1, last_error = NULL "
    "WHERE outbox_id = ANY(:ids)"
)
_MARK_FAILED = text(
    "UPDATE outbox SET status = 'pending', attempts = attempts + 1, last_error = 'publish failed', "
    "available_at = now() + make_interval(secs => LEAST(300, 2 ^ LEAST(attempts, 8))) "
    "WHERE outbox_id = ANY(:ids)"
)


def _claim(condition: str) -> TextClause:
    return text(
        "UPDATE outbox SET status = 'in_flight', available_at = now() + make_interval(secs => :lease_s) "
        "WHERE outbox_id IN ("
        f"  SELECT outbox_id FROM outbox WHERE {condition} AND ("
        "    (status = 'pending' AND available_at <= now() - make_interval(secs => :grace_s))"
        "    OR (status = 'in_flight' AND available_at <= now()))"
        "  ORDER BY outbox_id LIMIT :limit FOR UPDATE SKIP LOCKED"
        ") RETURNING outbox_id, topic, data, attributes, ordering_key"
    )


# Command notifications are the rows on the command topics; every other row mirrors an event.
_CLAIM_COMMANDS = _claim("topic LIKE :pattern")
_CLAIM_EVENTS = _claim("topic NOT LIKE :pattern")


class OutboxRelay:
    def __init__(self, engine: Engine, publisher: Publisher) -> None:
        self.engine = engine
        self.publisher = publisher

    def publish_rows(self, rows: Sequence[OutboxRow]) -> int:
        """Publish committed rows and record the outcome; the number published."""
        if not rows:
            return 0
        results = self.publisher.publish([row.message() for row in rows])
        ok = [row.outbox_id for row, server_id in zip(rows, results, strict=True) if server_id is not None]
        failed = [row.outbox_id for row, server_id in zip(rows, results, strict=True) if server_id is None]
        with self.engine.begin() as conn:
            if ok:
                conn.execute(_MARK_PUBLISHED, {"ids": ok})
            if failed:
                conn.execute(_MARK_FAILED, {"ids": failed})
        return len(ok)

    def sweep(
        self, *, topic_prefix: str, limit: int = 500, grace_s: float = 30.0, lease_s: float = 60.0
    ) -> dict[str, int]:
        """Publish rows left behind: command notifications (topics ``topic_prefix*``), then the rows
        mirroring events (every other topic: ``noetl-events`` or what ``NOETL_EVENTS_TOPIC`` names).
        Counts per kind: ``claimed``/``published`` for command notifications,
        ``events_claimed``/``events_published`` for events."""
        pattern = like_prefix(topic_prefix)
        commands = self._sweep(_CLAIM_COMMANDS, pattern, limit, grace_s, lease_s)
        events = self._sweep(_CLAIM_EVENTS, pattern, limit, grace_s, lease_s)
        return {
            "claimed": commands[0],
            "published": commands[1],
            "events_claimed": events[0],
            "events_published": events[1],
        }

    def _sweep(self, claim: TextClause, pattern: str, limit: int, grace_s: float, lease_s: float) -> tuple[int, int]:
        params = {"pattern": pattern, "limit": limit, "grace_s": grace_s, "lease_s": lease_s}
        with self.engine.begin() as conn:
            claimed = [
                OutboxRow(r.outbox_id, r.topic, r.data, r.attributes, r.ordering_key)
                for r in conn.execute(claim, params)
            ]
        claimed.sort(key=lambda row: row.outbox_id)  # one execution's events publish in log order
        return len(claimed), self.publish_rows(claimed)


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching every string that starts with ``prefix`` (its wildcards escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
