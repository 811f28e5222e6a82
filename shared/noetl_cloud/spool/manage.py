"""What an operator sees of the spool and does with its dead letters (the drainer's ``/api/spool/*``).

* :meth:`SpoolManager.overview` -- per subscription: its lanes with item counts, bytes and the age of
  their oldest item, its dead letters, its circuit (the downstream's, shared by the subscriptions that
  forward to it), whether a backlog is draining and whether a poison message halted its ``global`` lane;
* :meth:`SpoolManager.dead_letters` -- one page of dead letters, filtered by lane and reason, in lane
  then receive order, with a cursor (the last name shown);
* :meth:`SpoolManager.resend` -- one dead letter back to its lane (:meth:`~noetl_cloud.spool.port.SpoolBackend.resend`),
  then a drain of its subscription in the background;
* :meth:`SpoolManager.start_resend_all` -- every dead letter a filter matches, as one operation: a record
  in the coordination store (``spool-ops/<id>``: state, matched, resent, failed, the first errors) updated
  as it goes, which ``GET /api/spool/resends/<id>`` reads; the operation ends with one drain.

Listings read at most :data:`SCAN_LIMIT` objects per lane (a count that reached it says so).
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from noetl_cloud.envelope import utc_now
from noetl_cloud.errors import BadRequest, NoetlError, NotFound
from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.spool import events as ev
from noetl_cloud.spool.backends import Backends
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.item import SpoolItem, SpoolItemNotFound, SpoolRef, dlq_prefix
from noetl_cloud.spool.port import SpoolBackend
from noetl_cloud.spool.target import SpoolTarget

log = logging.getLogger(__name__)

SCAN_LIMIT: Final = 10_000
OPERATION_PREFIX: Final = "spool-ops/"
OPERATION_TTL_S: Final = 7 * 24 * 3600
#: The record of a running operation is written at most this often (and at its end).
PROGRESS_EVERY: Final = 10
MAX_ERRORS: Final = 10

Drain = Callable[[str], list[dict[str, Any]]]


class UnknownSubscription(NotFound):
    code = "subscription_not_found"


class OperationNotFound(NotFound):
    code = "operation_not_found"


@dataclass(frozen=True)
class Filter:
    """Which dead letters of a subscription: all, or those of one lane and/or one ``dlq_reason``."""

    subscription: str
    lane: str | None = None
    reason: str | None = None


def matching(backend: SpoolBackend, which: Filter, after: str | None = None) -> Iterator[tuple[SpoolRef, SpoolItem]]:
    """``(ref, item)`` of the dead letters ``which`` selects, after the name ``after``, in lane then receive order."""
    lanes = [which.lane] if which.lane is not None else backend.lanes(which.subscription, dlq=True)
    for lane in lanes:
        for ref in backend.list(which.subscription, lane, limit=SCAN_LIMIT, dlq=True):
            if after is not None and ref.name <= after:
                continue
            try:
                item, _payload = backend.get(ref)
            except SpoolItemNotFound:  # resent or expired meanwhile
                continue
            if which.reason is None or item.dlq_reason == which.reason:
                yield ref, item


class SpoolManager:
    """The operator's view of the spool and its dead letters, over the drainer's engine."""

    def __init__(
        self,
        engine: SpoolEngine,
        targets: Any,
        drain: Drain,
        *,
        background: Callable[[Callable[[], None]], None] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.engine = engine
        self.targets = targets
        self.drain = drain
        self.background = background or _thread
        self.clock = clock

    @property
    def kv(self) -> KeyValueStore:
        return self.engine.kv

    @property
    def backends(self) -> Backends:
        return self.engine.backends

    # -- where --------------------------------------------------------------------------------------

    def _spool(self, subscription: str) -> tuple[SpoolBackend, SpoolTarget | None]:
        """The subscription's backend and catalog target; the deployment's spool for one the catalog lost."""
        target = self.targets.target(subscription)
        if target is not None and target.enabled:
            return self.backends.resolve(target.spool)[0], target
        default = self.backends.default()
        if default is None:
            raise UnknownSubscription(
                f"no spool of subscription {subscription}", details={"subscription": subscription}
            )
        return default[0], target

    # -- the overview -------------------------------------------------------------------------------

    def subscriptions(self) -> list[str]:
        found: set[str] = set()
        default = self.backends.default()
        if default is not None:
            found.update(default[0].subscriptions())
        found.update(self.targets.spooling())
        return sorted(found)

    def overview(self, subscription: str | None = None) -> list[dict[str, Any]]:
        names = [subscription] if subscription else self.subscriptions()
        return [self._summary(name) for name in names]

    def _summary(self, subscription: str) -> dict[str, Any]:
        backend, target = self._spool(subscription)
        now = self.clock()
        lanes = []
        for lane in backend.lanes(subscription):
            refs = backend.list(subscription, lane, limit=SCAN_LIMIT)
            oldest = self._oldest(backend, refs)
            lanes.append(
                {
                    "lane": lane,
                    "items": len(refs),
                    "bytes": sum(ref.size for ref in refs),
                    "capped": len(refs) >= SCAN_LIMIT,
                    "oldest_spooled_at": oldest.isoformat() if oldest else None,
                    "oldest_age_s": round((now - oldest).total_seconds(), 3) if oldest else None,
                }
            )
        dead_items, dead_bytes = backend.usage(subscription, dlq=True)
        circuit = None
        if target is not None:
            state = self.engine.breaker(target).state()
            circuit = {
                "downstream": target.downstream,
                "state": state.state,
                "consecutive_failures": state.consecutive_failures,
                "opened_at": state.opened_at.isoformat() if state.opened_at else None,
            }
        return {
            "subscription": subscription,
            "registered": target is not None,
            "mode": target.spool.mode if target is not None else None,
            "ordering": target.spool.ordering if target is not None else None,
            "items": sum(lane["items"] for lane in lanes),
            "bytes": sum(lane["bytes"] for lane in lanes),
            "lanes": lanes,
            "dead_letters": {"items": dead_items, "bytes": dead_bytes, "lanes": backend.lanes(subscription, dlq=True)},
            "circuit": circuit,
            "backlog": self.engine.backlog(subscription),
            "halted": self.engine.halted(subscription),
        }

    @staticmethod
    def _oldest(backend: SpoolBackend, refs: list[SpoolRef]) -> datetime | None:
        for ref in refs[:3]:  # the lane's head (one deleted meanwhile: the next)
            try:
                return backend.get(ref)[0].spooled_at
            except SpoolItemNotFound:
                continue
        return None

    # -- dead letters -------------------------------------------------------------------------------

    def dead_letters(self, which: Filter, *, limit: int, after: str | None = None) -> dict[str, Any]:
        backend, _target = self._spool(which.subscription)
        rows: list[dict[str, Any]] = []
        more = False
        for ref, item in matching(backend, which, after):
            if len(rows) == limit:
                more = True
                break
            rows.append({**item.listing(ref.name, dead=True), "playbook": item.plan.get("playbook")})
        return {"subscription": which.subscription, "items": rows, "next": rows[-1]["name"] if more else None}

    def resend(self, subscription: str, name: str, *, by: str | None = None) -> dict[str, Any]:
        """One dead letter back to its lane, then a drain of the subscription in the background."""
        if not name.startswith(dlq_prefix(subscription)):
            raise BadRequest(
                f"{name!r} is not a dead letter of {subscription}",
                code="not_a_dead_letter",
                details={"subscription": subscription, "name": name},
            )
        backend, _target = self._spool(subscription)
        ref = SpoolRef(name, None, 0)
        item, _payload = backend.get(ref)
        live = backend.resend(ref)
        log.info("dead letter resent", extra={"subscription": subscription})
        self._emit(subscription, [ev.resent(item, name, live.name, by=by, operation_id=None)])
        self.background(lambda: self._drain_later(subscription))
        return {"subscription": subscription, "name": name, "live_name": live.name, "drain": "started"}

    def _emit(self, subscription: str, events: list[ev.SpoolEvent]) -> None:
        """Record (or park) the ``resent`` events; the resend itself is done either way."""
        if not events:
            return
        try:
            self.engine.journal.emit(subscription, events)
        except NoetlError as exc:
            log.error("resent events neither recorded nor parked", extra={"code": exc.code, "count": len(events)})

    def _drain_later(self, subscription: str) -> None:
        self._drain_quietly(subscription)

    def _drain_quietly(self, subscription: str) -> list[dict[str, Any]]:
        try:
            return self.drain(subscription)
        except NoetlError as exc:  # the schedule drains anyway
            log.warning("drain after a resend failed", extra={"subscription": subscription, "code": exc.code})
            return [{"subscription": subscription, "state": "failed", "code": exc.code}]

    # -- the bulk operation -------------------------------------------------------------------------

    def start_resend_all(self, which: Filter, *, by: str | None = None) -> dict[str, Any]:
        """Create the operation's record and run it in the background; the record as created."""
        backend, _target = self._spool(which.subscription)  # an unknown subscription fails here, synchronously
        operation_id = uuid.uuid4().hex
        now = self.clock().isoformat()
        record: dict[str, Any] = {
            "operation_id": operation_id,
            "kind": "resend_dead_letters",
            "subscription": which.subscription,
            "filter": {"lane": which.lane, "reason": which.reason},
            "state": "running",
            "matched": None,
            "resent": 0,
            "failed": 0,
            "errors": [],
            "drain": None,
            "started_at": now,
            "updated_at": now,
            "finished_at": None,
        }
        self.kv.create(OPERATION_PREFIX + operation_id, record, ttl_s=OPERATION_TTL_S)
        snapshot = copy.deepcopy(record)  # the thread changes its own
        self.background(lambda: self._resend_all(backend, which, record, by))
        return snapshot

    def operation(self, operation_id: str) -> dict[str, Any]:
        entry = (
            self.kv.get(OPERATION_PREFIX + operation_id) if operation_id.isalnum() and len(operation_id) <= 64 else None
        )
        if entry is None:
            raise OperationNotFound(f"no operation {operation_id}", details={"operation_id": operation_id})
        return entry.value

    def _save(self, record: dict[str, Any]) -> None:
        record["updated_at"] = self.clock().isoformat()
        entry = self.kv.get(OPERATION_PREFIX + record["operation_id"])
        self.kv.compare_and_set(
            OPERATION_PREFIX + record["operation_id"],
            record,
            expected_version=entry.version if entry else None,
            ttl_s=OPERATION_TTL_S,
        )

    def _resend_all(self, backend: SpoolBackend, which: Filter, record: dict[str, Any], by: str | None) -> None:
        state: Literal["done", "failed"] = "done"
        events: list[ev.SpoolEvent] = []
        operation_id = record["operation_id"]
        try:
            found = list(matching(backend, which, None))
            record["matched"] = len(found)
            self._save(record)
            for count, (ref, item) in enumerate(found, 1):
                try:
                    live = backend.resend(ref)
                    events.append(ev.resent(item, ref.name, live.name, by=by, operation_id=operation_id))
                    record["resent"] += 1
                except SpoolItemNotFound:  # resent by someone else meanwhile: nothing left to do
                    record["resent"] += 1
                except NoetlError as exc:
                    record["failed"] += 1
                    if len(record["errors"]) < MAX_ERRORS:
                        record["errors"].append({"name": ref.name, "code": exc.code})
                if count % PROGRESS_EVERY == 0:
                    self._emit(which.subscription, events)
                    events.clear()
                    self._save(record)
            self._emit(which.subscription, events)
            record["state"] = "draining"
            self._save(record)
            if record["resent"]:
                record["drain"] = self._drain_quietly(which.subscription)
        except NoetlError as exc:
            state = "failed"
            record["errors"] = [*record["errors"], {"name": None, "code": exc.code}][:MAX_ERRORS]
        except Exception:
            log.exception("resend operation failed", extra={"operation_id": record["operation_id"]})
            state = "failed"
        record["state"] = state
        record["finished_at"] = self.clock().isoformat()
        try:
            self._save(record)
        except NoetlError:
            log.error("resend operation's record not written", extra={"operation_id": record["operation_id"]})


def _thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="spool-manage", daemon=True).start()
