"""The outbox relay: publishes outbox rows after their transaction committed.

Two kinds of rows: command notifications (``noetl-commands-<pool>``) and the mirror of the events
(``noetl-events``, ordering key = execution id, attributes ``event_type``, ``tenant_id``,
``organization_id``). A writer hands the rows it just committed to :meth:`OutboxRelay.hand_off`,
after its commit and before it answers. With ``background`` on (every role that serves requests),
a daemon thread of the process publishes them, so no request waits on Pub/Sub:

* command notifications within ``linger_s`` (10 ms), the rows of many requests in one ``Publish``;
* the events' mirror rows at the next *settle*, every ``settle_every_s`` (200 ms): the projector's read
  model may trail by that much, and the events topic gets one request per settle, not one per batch,
  with one entry per execution (its last row: the projector folds up to the tip whatever event a
  delivery names), however many appends the execution made within the settle, bundled into one
  message per 100 executions (``eventlog/bundles.py``);
* at the settle it also deletes every row it published since the last one, in one statement (a
  published row has done its work; deleting writes nothing new, where marking it rewrote the row).

The queue is bounded (``max_queued`` rows), and rows it cannot take are simply left ``pending``.
Rows whose publish fails stay ``pending`` with an exponential back-off (2, 4, ... 256 s, at most
300 s), and :meth:`OutboxRelay.sweep` publishes whatever a crashed or failed writer left on both
kinds of topic: rows still ``pending`` after a grace period, and rows stuck ``in_flight`` past their
lease. The sweep runs from the relay's own thread every ``sweep_every_s`` (so a process that died
between its commit and its publish is covered by any live one within grace + interval) and from
the scheduled endpoint. A message may so be published twice (a crash between its publish and the
settle's delete); every consumer is idempotent (claims, dedup, the projector's tracking position).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Engine, TextClause, text

from noetl_cloud.db.engine import CUSTOM_PLANS
from noetl_cloud.envelope import canonical_json
from noetl_cloud.eventlog.bundles import bundled
from noetl_cloud.messaging.port import OutboundMessage, Publisher
from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)


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


# A published row has done its work: deleted, it writes no new row version and no index entries (an
# update of ``status`` could not be HOT: ``ix_outbox_claimable`` is partial on it), and the table
# keeps only what is still to publish.
_DELETE_PUBLISHED = text("DELETE FROM outbox WHERE outbox_id = ANY(:ids)")
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


@dataclass
class RelayStats:
    """What this process's relay did: rows handed off, published, left to the sweep, and the delay
    from hand-off (just after the commit) to the end of the publish, in milliseconds: of command
    notifications (``lag_ms_*``) and of the events' mirror rows, which wait for the settle
    (``mirror_lag_ms_max``). Read and written under the relay's lock."""

    handed_off: int = 0
    publishes: int = 0  # calls to the publisher (each one Publish request per topic it names)
    published: int = 0  # rows published (every row a bundle names counts)
    left_for_sweep: int = 0
    swept: int = 0
    lag_ms_last: float = 0.0
    lag_ms_max: float = 0.0
    mirror_lag_ms_max: float = 0.0
    coalesced: int = 0  # mirror rows not published: a later row of the same execution, in the same settle, was


class OutboxRelay:
    def __init__(
        self,
        engine: Engine,
        publisher: Publisher,
        *,
        background: bool = False,
        max_queued: int = 20_000,
        sweep_every_s: float = 0.0,
        sweep_grace_s: float = 30.0,
        linger_s: float = 0.01,
        settle_every_s: float = 0.2,
        max_batch_rows: int = 1000,
        topic_prefix: str = "noetl-commands-",
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.background = background
        self.max_queued = max_queued
        self.sweep_every_s = sweep_every_s
        self.sweep_grace_s = sweep_grace_s  # how old a pending row is before the relay's sweep takes it
        self.linger_s = linger_s  # how long the thread waits for more rows before it publishes a batch
        self.settle_every_s = settle_every_s  # how often held mirror rows go out and published rows are deleted
        self.max_batch_rows = max_batch_rows
        self.topic_prefix = topic_prefix
        self.stats = RelayStats()
        self._queue: queue.Queue[tuple[float, Sequence[OutboxRow]]] = queue.Queue()
        self._queued_rows = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._stopping = threading.Event()
        # The thread's own: mirror rows held for the next settle, ids published and not yet deleted, and
        # how many queue items wait for that settle (``flush`` waits for them).
        self._held: list[tuple[float, OutboxRow]] = []
        self._unsettled_ids: list[int] = []
        self._unsettled_batches = 0

    def hand_off(self, rows: Sequence[OutboxRow]) -> None:
        """Publish rows a writer just committed: in the background when the relay has a thread (the
        call returns at once), else now. Rows a full queue cannot take stay ``pending`` for the sweep."""
        if not rows:
            return
        if not self.background:
            self.publish_rows(rows)
            return
        with self._lock:
            self._start()
            self.stats.handed_off += len(rows)
            if self._queued_rows + len(rows) > self.max_queued:
                self.stats.left_for_sweep += len(rows)
                return
            self._queued_rows += len(rows)
        self._queue.put((time.monotonic(), rows))

    def report(self) -> dict[str, Any]:
        """What this process's relay did and holds now (``GET /api/internal/outbox/relay``)."""
        with self._lock:
            return {
                "background": self.background,
                "queued_rows": self._queued_rows,
                "linger_ms": self.linger_s * 1000,
                "settle_every_ms": self.settle_every_s * 1000,
                "sweep_every_s": self.sweep_every_s,
                **asdict(self.stats),
            }

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every row handed off so far is published and deleted (or left pending); true when
        done (within ``settle_every_s`` of the last publish)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self._queue.unfinished_tasks

    def _start(self) -> None:
        """Start this process's relay thread once (again in a forked child: threads do not survive fork)."""
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="outbox-relay", daemon=True)
        self._thread.start()

    def start(self) -> None:
        """Start the relay thread now, before any hand-off (it otherwise starts with the first one), so
        that it sweeps from the start."""
        if self.background:
            with self._lock:
                self._start()

    def close(self, timeout: float = 10.0) -> None:
        """Publish what was handed off, then stop the relay thread (rows it could not publish stay pending)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._stopping.set()
            self._queue.put((time.monotonic(), []))  # wakes the thread
            thread.join(timeout)
            self._stopping.clear()

    def _run(self) -> None:
        next_sweep = time.monotonic() + self.sweep_every_s
        settle_at: float | None = None  # when the held mirror rows are published and the published deleted
        while not self._stopping.is_set():
            deadlines = [d for d in (next_sweep if self.sweep_every_s > 0 else None, settle_at) if d is not None]
            wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            try:
                batches = [self._queue.get(timeout=wait)]
            except queue.Empty:
                batches = []
            # Linger a moment so the rows of the requests being answered now go in the same Publish
            # (fewer requests, less CPU on both sides).
            linger_until = time.monotonic() + self.linger_s
            while batches and sum(len(b) for _t, b in batches) < self.max_batch_rows:
                try:
                    batches.append(self._queue.get(timeout=max(0.0, linger_until - time.monotonic())))
                except queue.Empty:
                    break
            if batches:
                self._take(batches)
                settle_at = settle_at or time.monotonic() + self.settle_every_s
            if settle_at is not None and (
                time.monotonic() >= settle_at or len(self._held) + len(self._unsettled_ids) >= self.max_batch_rows
            ):
                self._settle()
                settle_at = None
            if self.sweep_every_s > 0 and time.monotonic() >= next_sweep and not self._stopping.is_set():
                next_sweep = time.monotonic() + self.sweep_every_s
                self._sweep_quietly()
        self._settle()

    def _take(self, batches: list[tuple[float, Sequence[OutboxRow]]]) -> None:
        """Publish the command notifications of ``batches`` now and hold their mirror rows for the next
        settle; the ids published wait for its delete, and failed rows go back to the sweep at once."""
        commands, held = [], []
        for handed_at, batch in batches:
            for row in batch:
                if row.topic.startswith(self.topic_prefix):
                    commands.append(row)
                else:
                    held.append((handed_at, row))
        self._held.extend(held)
        self._unsettled_batches += len(batches)
        with self._lock:
            self._queued_rows -= len(commands) + len(held)
        if commands:
            self._publish_quietly(commands, [t for t, _b in batches])

    def _settle(self) -> None:
        """Publish the held mirror rows, then delete every row published since the last settle (a failed
        delete leaves rows pending: the sweep publishes them again; their consumers are idempotent).

        Of one execution's held mirror rows only the last is published: the projector folds up to the
        tip whatever event a delivery names, so the earlier ones would only repeat it. They are deleted
        with it once it is published (kept pending with it when it is not)."""
        held, self._held = self._held, []
        if held:

            def execution_of(row: OutboxRow) -> tuple[str, str]:
                return row.topic, row.ordering_key or f"row/{row.outbox_id}"

            last: dict[tuple[str, str], OutboxRow] = {}
            for _t, row in sorted(held, key=lambda item: item[1].outbox_id):
                last[execution_of(row)] = row
            kept = list(last.values())
            covered: dict[int, list[int]] = {}
            for _t, row in held:
                tip = last[execution_of(row)]
                if tip.outbox_id != row.outbox_id:
                    covered.setdefault(tip.outbox_id, []).append(row.outbox_id)
            with self._lock:
                self.stats.coalesced += len(held) - len(kept)
            kept = bundled(kept, covered)  # one message per topic and BUNDLE_MAX executions
            self._publish_quietly(kept, [t for t, _r in held], mirror=True, covered=covered)
        ids, self._unsettled_ids = self._unsettled_ids, []
        try:
            if ids:
                self._record(ids, [])
        except Exception:
            log.warning("deleting %d published outbox rows failed; the sweep publishes them", len(ids), exc_info=True)
        for _ in range(self._unsettled_batches):
            self._queue.task_done()
        self._unsettled_batches = 0

    def _publish_quietly(
        self,
        rows: list[OutboxRow],
        handed_at: list[float],
        *,
        mirror: bool = False,
        covered: dict[int, list[int]] | None = None,
    ) -> None:
        """Publish ``rows``; the ids published (and those ``covered`` by one published) wait for the
        settle's delete, the failed ones get their back-off."""
        rows.sort(key=lambda r: r.outbox_id)  # one execution's rows publish in the order they were written
        try:
            ok, failed = self._publish(rows)
            if failed:
                self._record([], failed)
        except Exception:  # the rows stay pending; the sweep publishes them
            log.warning("publishing outbox rows failed; the outbox sweep publishes them", exc_info=True)
            ok = []
        self._unsettled_ids.extend(ok)
        if covered:
            self._unsettled_ids.extend(i for published in ok for i in covered.get(published, ()))
        done = time.monotonic()
        sent = set(ok)  # a bundle's one message publishes every row it names
        rows_out = sum(len(r.data.get("deliveries", ())) or 1 for r in rows if r.outbox_id in sent)
        with self._lock:
            s = self.stats
            s.publishes += 1
            s.published += rows_out
            s.left_for_sweep += len(rows) - len(ok)
            if mirror:
                s.mirror_lag_ms_max = max(s.mirror_lag_ms_max, (done - min(handed_at)) * 1000)
            else:
                s.lag_ms_last = (done - max(handed_at)) * 1000
                s.lag_ms_max = max(s.lag_ms_max, (done - min(handed_at)) * 1000)

    def _sweep_quietly(self) -> None:
        try:
            counts = self.sweep(topic_prefix=self.topic_prefix, grace_s=self.sweep_grace_s)
        except Exception:  # the next interval (or the scheduled sweep) tries again
            log.warning("the relay's outbox sweep failed", exc_info=True)
            return
        with self._lock:
            self.stats.swept += counts["published"] + counts["events_published"]

    def publish_rows(self, rows: Sequence[OutboxRow]) -> int:
        """Publish committed rows and record the outcome now; the number published."""
        if not rows:
            return 0
        ok, failed = self._publish(rows)
        self._record(ok, failed)
        return len(ok)

    def _publish(self, rows: Sequence[OutboxRow]) -> tuple[list[int], list[int]]:
        """Publish ``rows``: the ids published and the ids that failed."""
        if not rows:
            return [], []
        results = self.publisher.publish([row.message() for row in rows])
        ok = [row.outbox_id for row, server_id in zip(rows, results, strict=True) if server_id is not None]
        failed = [row.outbox_id for row, server_id in zip(rows, results, strict=True) if server_id is None]
        return ok, failed

    def _record(self, ok: Sequence[int], failed: Sequence[int]) -> None:
        """Delete the rows published (``ok``); give the ``failed`` ones their back-off."""
        if not ok and not failed:
            return
        with self.engine.begin() as conn:
            conn.execute(CUSTOM_PLANS)
            if ok:
                conn.execute(_DELETE_PUBLISHED, {"ids": list(ok)})
            if failed:
                conn.execute(_MARK_FAILED, {"ids": list(failed)})

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
            conn.execute(CUSTOM_PLANS)
            claimed = [
                OutboxRow(r.outbox_id, r.topic, r.data, r.attributes, r.ordering_key)
                for r in conn.execute(claim, params)
            ]
        claimed.sort(key=lambda row: row.outbox_id)  # one execution's events publish in log order
        return len(claimed), self.publish_rows(claimed)


def relay_for(engine: Engine, publisher: Publisher, settings: Settings) -> OutboxRelay:
    """The relay a role that writes outbox rows runs, as its settings say."""
    return OutboxRelay(
        engine,
        publisher,
        background=settings.outbox_publish == "background",
        sweep_every_s=settings.outbox_sweep_every_s,
        linger_s=settings.outbox_linger_ms / 1000,
        settle_every_s=settings.outbox_settle_every_ms / 1000,
        topic_prefix=settings.command_topic_prefix,
    )


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching every string that starts with ``prefix`` (its wildcards escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
