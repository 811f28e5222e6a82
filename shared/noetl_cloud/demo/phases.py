"""The phases of one ``noetl-cloud demo`` run and their checks: :class:`Demo` drives them on a running stack.

Setup (the demo playbook registered against the fixture API, the subscription runtime ready, the
spool drained of what an interrupted earlier run left), live traffic (signed webhooks through the
ingress, messages published to the runtime's topic), the outage (execute stopped, webhooks spooled,
execute started again and the spool drained by the stack itself), then the checks: what the database
holds (executions, the orders the frames saved, events) and replay parity. :meth:`Demo.run` returns
the summary; :mod:`noetl_cloud.demo.report` names what did not hold and prints it.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

from noetl_cloud.demo import setup
from noetl_cloud.demo.fixture import FixtureApi, orders_of
from noetl_cloud.demo.report import port_of, problems_of
from noetl_cloud.demo.senders import Delivery, publish, send_webhook
from noetl_cloud.spool.events import DEAD_LETTERED, REPLAYED
from noetl_cloud.web.client import ApiClient, static_token

ROLES = ("execute", "ingress", "worker", "projector", "frames", "spool_drainer", "subscription_runtime")
TERMINAL = ("completed", "failed", "cancelled")


class DemoError(RuntimeError):
    """The demo could not run (or a phase of it did not finish); the message says where."""


@dataclass(frozen=True)
class Options:
    webhooks_per_scheme: int = 3
    pubsub_messages: int = 6
    outage_per_scheme: int = 2
    timeout_s: float = 150.0
    as_json: bool = False


@dataclass
class Channel:
    """One row of the summary."""

    name: str
    subscription: str
    sent: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    batches: list[str] = field(default_factory=list)
    executions: int = 0
    completed: int = 0
    failed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "channel": self.name,
            "subscription": self.subscription,
            "sent": self.sent,
            "answers": dict(self.answers),
            "executions": self.executions,
            "completed": self.completed,
            "failed": self.failed,
        }


class Demo:
    def __init__(self, env: Mapping[str, str], stack: Any, options: Options, say: Callable[[str], None]) -> None:
        from noetl_cloud.db.engine import normalize_url
        from noetl_cloud.db.tls import tls_engine

        self.env = dict(env)
        self.stack = stack
        self.options = options
        self.say = say
        self.run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        self.api = setup.api_client(env)
        self.http = urllib3.PoolManager(maxsize=8)
        self.db = tls_engine(normalize_url(env["NOETL_DATABASE_URL"]), pool_size=2)
        self.demo_dsn = setup.demo_database_url(env["NOETL_DATABASE_URL"])
        self.demo_db = tls_engine(normalize_url(self.demo_dsn), pool_size=1)
        self.secrets = setup.ensure_secrets(Path(env["NOETL_SECRETS_DIR"]))
        self.base = stack.port_base
        self.ingress_url = f"http://127.0.0.1:{self.base + port_of('ingress')}"
        self.drainer_url = f"http://127.0.0.1:{self.base + port_of('spool_drainer')}"
        self.runtime_url = f"http://127.0.0.1:{self.base + port_of('subscription_runtime')}"
        self.version = 0
        self.channels: list[Channel] = []
        self.problems: list[str] = []
        self.report: dict[str, Any] = {}
        self.phases: dict[str, float] = {}
        self._current, self._mark = "setup", time.monotonic()

    def close(self) -> None:
        self.api.close()
        self.http.clear()
        self.db.dispose()
        self.demo_db.dispose()

    # -- phases ----------------------------------------------------------------------------------

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[self._current] = round(now - self._mark, 1)
        self._current, self._mark = name, now

    def run(self, fixture: FixtureApi) -> dict[str, Any]:
        started = time.monotonic()
        self._current, self._mark = "setup", started
        registered = setup.register(self.api, setup.playbook_content(run=self.run_id, api_url=fixture.url))
        self.version = int(registered["version"])
        self.say(f"run {self.run_id}: {setup.PLAYBOOK_PATH} v{self.version} pages through {fixture.url}/orders")
        self._wait_runtime_ready()
        self._drain()  # what an interrupted earlier run may have left in the spool goes first

        self._phase("live")
        live = self._live_traffic()
        expected_live = sum(c.sent for c in live)
        self.say(f"live: {expected_live} messages in; waiting for their executions")
        self._wait_executions(expected_live)

        self._phase("outage")
        outage = self._outage()
        self._wait_executions(expected_live + outage.sent)

        self._phase("checks")
        executions = self._executions()
        self._count_channels(executions, outage)
        replay = self._replay_parity([row["execution_id"] for row in executions])
        rows = self._rows()
        events = self._events([row["execution_id"] for row in executions])
        statuses = Counter(row["status"] for row in executions)
        summary = {
            "run": self.run_id,
            "playbook": {"path": setup.PLAYBOOK_PATH, "version": self.version},
            "channels": [c.to_dict() for c in self.channels],
            "executions": {
                "total": len(executions),
                "completed": statuses.get("completed", 0),
                "failed": len(executions) - statuses.get("completed", 0),
                "ids": [str(row["execution_id"]) for row in executions],
            },
            "rows": {**rows, "fixture_pages": sum(fixture.pages[b] for c in self.channels for b in c.batches)},
            "events": events,
            "spool": self.report,
            "replay": replay,
            "elapsed_s": round(time.monotonic() - started, 1),
        }
        self._phase("done")
        summary["phases_s"] = self.phases
        summary["problems"] = self.problems + problems_of(summary)
        summary["ok"] = not summary["problems"]
        return summary

    def _wait_runtime_ready(self) -> None:
        from noetl_cloud.local.process import http_ok, wait_until

        if not wait_until(lambda: http_ok(f"{self.runtime_url}/readyz"), timeout=60):
            raise DemoError(
                f"the subscription runtime at {self.runtime_url} is not pulling {setup.RUNTIME_SUBSCRIPTION} "
                "(see local/.state/logs/subscription_runtime.log)"
            )

    def _payload(self, channel: str, n: int) -> dict[str, Any]:
        return {"batch": f"{self.run_id}-{channel}-{n}", "channel": channel, "n": n}

    def _send(self, channel: Channel, listener: setup.Listener, n: int, tag: str) -> Delivery:
        payload = self._payload(f"{tag}{listener.listener.removeprefix('demo-')}", n)
        delivery = send_webhook(
            self.http,
            self.ingress_url,
            listener.listener,
            listener.scheme,
            self.secrets[listener.secret_alias],
            payload,
        )
        channel.sent += 1
        channel.batches.append(delivery.batch)
        channel.answers[f"{delivery.status} {delivery.outcome}"] += 1
        return delivery

    def _live_traffic(self) -> list[Channel]:
        live: list[Channel] = []
        for listener in setup.LISTENERS:
            channel = Channel(f"webhook {listener.scheme}", listener.path)
            for n in range(self.options.webhooks_per_scheme):
                self._send(channel, listener, n, "")
            live.append(channel)
        pubsub = Channel("pubsub → runtime", setup.RUNTIME_SUBSCRIPTION)
        payloads = [self._payload("pubsub", n) for n in range(self.options.pubsub_messages)]
        publish(self.env["NOETL_PROJECT_ID"], setup.PUBSUB_TOPIC, self.env["PUBSUB_EMULATOR_HOST"], payloads)
        pubsub.sent = len(payloads)
        pubsub.batches = [p["batch"] for p in payloads]
        pubsub.answers["published"] = len(payloads)
        live.append(pubsub)
        self.channels.extend(live)
        for channel in live[:-1]:
            if channel.answers != Counter({"202 accepted": channel.sent}):
                self.problems.append(f"{channel.name}: the ingress answered {dict(channel.answers)}, not 202 accepted")
        return live

    def _outage(self) -> Channel:
        outage = Channel("outage: execute down", "demo/webhooks/*")
        self.say("outage: stopping the execute role")
        began = datetime.now(UTC)
        self.stack.stop_role("execute", echo=lambda _line: None)
        try:
            for listener in setup.LISTENERS:
                for n in range(self.options.outage_per_scheme):
                    self._send(outage, listener, n, "outage-")
            listed = self._spooled_items()
        finally:
            self.say("outage: starting the execute role again")
            self.stack.up(echo=lambda _line: None, roles=list(ROLES))
        spooled = outage.answers.get("202 spooled", 0)
        self.say(f"outage: {spooled} deliveries spooled; the stack drains them by itself (no drain command)")
        restarted = time.monotonic()
        deadline = restarted + self.options.timeout_s
        while True:  # the circuit's probe and the stack's scheduler start the drain (docs/spool.md)
            left, settled = self._spooled_items(), self._spool_events(began)
            if (not left and sum(settled.values()) >= spooled) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.report = {
            "spooled": spooled,
            "listed_during_outage": listed,
            "replayed": settled.get(REPLAYED, 0),
            "dead_lettered": settled.get(DEAD_LETTERED, 0),
            "left": left,
            "recovered_s": round(time.monotonic() - restarted, 1),
            "outage_began": began.isoformat(),
        }
        self.channels.append(outage)
        if outage.answers != Counter({"202 spooled": outage.sent}):
            self.problems.append(f"outage: the ingress answered {dict(outage.answers)}, not 202 spooled")
        return outage

    def _spooled_items(self) -> int:
        from noetl_cloud.settings import Settings
        from noetl_cloud.spool.backends import SettingsBackends

        backend = SettingsBackends(Settings.from_env(self.env)).default()
        if backend is None:
            raise DemoError("the stack has no spool (NOETL_SPOOL_BACKEND / NOETL_SPOOL_BUCKET are not set)")
        return sum(len(backend[0].list(listener.path)) for listener in setup.LISTENERS)

    def _spool_events(self, since: datetime) -> dict[str, int]:
        """The replayed and dead-lettered events of the spool since ``since``, by type."""
        rows = self._query(
            "SELECT event_type, count(*) AS n FROM event WHERE event_type IN (:replayed, :dead)"
            " AND ingest_time >= :since GROUP BY event_type",
            replayed=REPLAYED,
            dead=DEAD_LETTERED,
            since=since,
        )
        return {row["event_type"]: int(row["n"]) for row in rows}

    def _drain(self) -> list[dict[str, Any]]:
        token = self.env["NOETL_INTERNAL_API_TOKEN"]
        reports: list[dict[str, Any]] = []
        with ApiClient(self.drainer_url, token_source=static_token(token), timeout_s=120, retries=2) as drainer:
            for listener in setup.LISTENERS:
                answer = drainer.post("/drain", json={"subscription": listener.path}).raise_for_error().json
                reports.extend(answer["results"])
        return reports

    # -- what the database holds -------------------------------------------------------------------

    def _query(self, sql: str, engine: Any = None, **params: Any) -> list[dict[str, Any]]:
        from sqlalchemy import text

        with (engine or self.db).connect() as conn:
            return [dict(row._mapping) for row in conn.execute(text(sql), params)]

    def _executions(self) -> list[dict[str, Any]]:
        return self._query(
            "SELECT execution_id, status, meta->>'subscription_path' AS subscription, meta->>'message_id' AS message_id"
            " FROM execution WHERE path = :path AND version = :version ORDER BY created_at, execution_id",
            path=setup.PLAYBOOK_PATH,
            version=self.version,
        )

    def _wait_executions(self, expected: int) -> None:
        deadline = time.monotonic() + self.options.timeout_s
        last = ""
        while True:
            rows = self._executions()
            statuses = Counter(row["status"] for row in rows)
            done = sum(statuses[s] for s in TERMINAL)
            line = f"  executions: {len(rows)} of {expected} started, {done} ended"
            if line != last:
                self.say(line)
                last = line
            if len(rows) >= expected and done == len(rows):
                return
            if time.monotonic() > deadline:
                raise DemoError(
                    f"after {self.options.timeout_s:g} s {len(rows)} of {expected} executions started and "
                    f"{done} ended ({dict(statuses)}); see local/.state/logs/"
                )
            time.sleep(0.5)

    def _count_channels(self, executions: list[dict[str, Any]], outage: Channel) -> None:
        replayed = {
            str(row["execution_id"])
            for row in self._query(
                "SELECT payload->>'execution_id' AS execution_id FROM event"
                " WHERE event_type = 'subscription.message.replayed' AND ingest_time >= :began",
                began=self.report["outage_began"],
            )
        }
        by_path: dict[str, list[dict[str, Any]]] = {}
        for row in executions:
            key = "outage" if str(row["execution_id"]) in replayed else str(row["subscription"])
            by_path.setdefault(key, []).append(row)
        for channel in self.channels:
            rows = by_path.get("outage" if channel is outage else channel.subscription, [])
            channel.executions = len(rows)
            channel.completed = sum(1 for r in rows if r["status"] == "completed")
            channel.failed = channel.executions - channel.completed

    def _rows(self) -> dict[str, Any]:
        saved = {
            row["batch"]: row["n"]
            for row in self._query(
                "SELECT batch, count(*) AS n FROM demo_orders WHERE run = :run GROUP BY batch",
                self.demo_db,
                run=self.run_id,
            )
        }
        expected = {batch: len(orders_of(batch)) for channel in self.channels for batch in channel.batches}
        wrong = sorted(b for b in expected if saved.get(b) != expected[b])
        return {
            "saved": sum(saved.values()),
            "expected": sum(expected.values()),
            "batches": len(expected),
            "batches_wrong": wrong,
        }

    def _events(self, ids: list[int]) -> dict[str, Any]:
        per_type = {
            row["event_type"]: row["n"]
            for row in self._query(
                "SELECT event_type, count(*) AS n FROM event WHERE execution_id = ANY(:ids) GROUP BY event_type",
                ids=ids,
            )
        }
        spool = {
            row["event_type"].removeprefix("subscription."): row["n"]
            for row in self._query(
                "SELECT event_type, count(*) AS n FROM event WHERE ingest_time >= :began"
                " AND (stream_id LIKE 'spool/demo/%' OR stream_id LIKE 'circuit/%') GROUP BY event_type",
                began=self.report["outage_began"],
            )
        }
        return {
            "written": sum(per_type.values()),
            "frames_committed": per_type.get("frame.committed", 0),
            "playbooks_completed": per_type.get("playbook.completed", 0),
            "spool_and_circuit": spool,
        }

    def _replay_parity(self, ids: list[int]) -> dict[str, Any]:
        deadline = time.monotonic() + 60.0
        drift: dict[str, list[str]] = {}
        ok = 0
        for eid in ids:
            query = urlencode({"tenant_id": "default", "organization_id": "default", "execution_id": eid})
            while True:
                report = self.api.get(f"/api/replay/verify?{query}").raise_for_error().json
                if report["ok"] or report.get("events_behind", 0) <= 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)  # the projector is still folding this execution's last events
            if report["ok"]:
                ok += 1
            else:
                drift[str(eid)] = [*report["drift"], f"{report.get('events_behind', 0)} events behind"]
        return {"verified": len(ids), "ok": ok, "drift": drift}
