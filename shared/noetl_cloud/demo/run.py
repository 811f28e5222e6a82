"""``noetl-cloud demo``: one run of the whole system on the local stack, checked end to end.

1. The stack with every role (reused when it runs; ``local up --roles all`` also prepared the demo's
   catalog entries, secrets, database and Pub/Sub subscription: :mod:`noetl_cloud.demo.setup`).
2. A fixture API on a free loopback port, and a version of ``demo/orders`` that pages through it.
3. Live traffic: signed webhooks for three schemes through the ingress, JSON messages published to
   the runtime's topic; every message becomes one execution, all of which must complete.
4. An outage: the execute role stopped; webhooks to the same listeners are spooled (202); execute
   started again, and the stack drains the spool by itself (the circuit's probe asks the drainer, the
   stack's scheduler calls it as Cloud Scheduler would; no drain command): each spooled delivery
   runs exactly once.
5. Checks: every message one execution, every execution completed, every order saved once to
   ``noetl_demo.demo_orders`` (by frames), the spool empty, live projections equal to a fresh fold
   of each execution's events (replay parity). Then the summary and the commands to look closer.

Exit 0 only when every check held; otherwise 1, naming what did not.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
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


def problems_of(summary: dict[str, Any]) -> list[str]:
    """What did not check out in a run's summary (empty: the demo succeeded), each naming the part."""
    problems = []
    for c in summary["channels"]:
        if c["executions"] != c["sent"]:
            problems.append(f"{c['channel']}: {c['sent']} messages in, {c['executions']} executions")
        if c["failed"]:
            problems.append(f"{c['channel']}: {c['failed']} executions did not complete")
    spool = summary["spool"]
    if not spool["spooled"] == spool["listed_during_outage"] == spool["replayed"]:
        counts = f"{spool['spooled']} spooled, {spool['listed_during_outage']} listed, {spool['replayed']} replayed"
        problems.append(f"spool: {counts}")
    if spool["left"] or spool["dead_lettered"]:
        problems.append(f"spool: {spool['left']} items left, {spool['dead_lettered']} dead-lettered")
    rows = summary["rows"]
    if rows["saved"] != rows["expected"] or rows["batches_wrong"]:
        problems.append(
            f"rows: {rows['saved']} saved, {rows['expected']} expected; batches off: {rows['batches_wrong'][:5]}"
        )
    replay = summary["replay"]
    if replay["ok"] != replay["verified"]:
        problems.append(f"replay parity: {replay['ok']} of {replay['verified']} OK, drift in {replay['drift']}")
    return problems


def port_of(role: str) -> int:
    from noetl_cloud.local.stack import ROLE_PORTS

    return ROLE_PORTS[role]


# -- output ------------------------------------------------------------------------------------------


def table(summary: dict[str, Any]) -> str:
    rows = [("channel", "subscription", "in", "answered", "executions", "completed", "failed")]
    for c in summary["channels"]:
        answered = ", ".join(f"{k} x{v}" for k, v in sorted(c["answers"].items()))
        rows.append(
            (
                c["channel"],
                c["subscription"],
                str(c["sent"]),
                answered,
                str(c["executions"]),
                str(c["completed"]),
                str(c["failed"]),
            )
        )
    ex = summary["executions"]
    total_in = sum(c["sent"] for c in summary["channels"])
    rows.append(("total", "", str(total_in), "", str(ex["total"]), str(ex["completed"]), str(ex["failed"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 4, 5, 6}
    lines = []
    for n, r in enumerate(rows):
        cells = [r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]) for i in range(len(r))]
        lines.append("  ".join(cells).rstrip())
        if n == 0 or n == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    ev, spool, rows_, replay = summary["events"], summary["spool"], summary["rows"], summary["replay"]
    sc = ev["spool_and_circuit"]
    verdict = "OK" if replay["ok"] == replay["verified"] else "DRIFT"
    lines += [
        "",
        f"rows saved     {rows_['saved']} of {rows_['expected']} orders in noetl_demo.demo_orders "
        f"({rows_['batches']} batches, {rows_['fixture_pages']} fixture pages fetched, "
        f"{ev['frames_committed']} frames committed)",
        f"events         {ev['written']} written for these executions; spool and circuit: "
        + ", ".join(f"{k} {v}" for k, v in sorted(sc.items())),
        f"spool          {spool['spooled']} spooled while execute was down ({spool['listed_during_outage']} listed), "
        f"{spool['replayed']} replayed by the drainer {spool.get('recovered_s', '?')} s after execute came back "
        f"(no drain command), {spool['left']} left, {spool['dead_lettered']} dead-lettered",
        f"replay parity  {verdict}: {replay['ok']} of {replay['verified']} executions' live projections "
        "equal a fresh fold of their events",
        f"time           {summary['elapsed_s']} s ("
        + ", ".join(f"{k} {v} s" for k, v in summary.get("phases_s", {}).items())
        + ")",
    ]
    return "\n".join(lines)


def inspect_commands(
    summary: dict[str, Any],
    port_base: int,
    database_url: str,
    logs: str = "local/.state/logs",
    now: datetime | None = None,
) -> str:
    """The commands to look at each part of the run, each one working as printed (from the checkout,
    after ``eval "$(.venv/bin/noetl-cloud local env)"``). The replay state is asked as of ``now`` (the end
    of the run): ``GET /api/replay/state`` needs one cutoff."""
    as_of = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # no "+": a URL
    ids = summary["executions"]["ids"]
    eid = ids[0] if ids else "<execution id>"
    api = 'curl -s -H "Authorization: Bearer $NOETL_INTERNAL_API_TOKEN" "$NOETL_API_URL'
    noetl = ".venv/bin/noetl-cloud"
    version = summary["playbook"]["version"]
    runtime = f"http://127.0.0.1:{port_base + port_of('subscription_runtime')}"
    demo_db = setup.demo_database_url(database_url)
    sql = (
        "SELECT batch, count(*) AS orders, count(DISTINCT frame_id) AS frames FROM demo_orders "
        f"WHERE run = '{summary['run']}' GROUP BY batch"
    )
    pairs = [
        ("the playbook this run executed", f'{api}/api/catalog/{setup.PLAYBOOK_PATH}?version={version}"'),
        ("the listeners and the runtime's subscription", f'{api}/api/subscriptions?state=active"'),
        ("one execution: status, ctx, results; then its events", f'{api}/api/executions/{eid}"'),
        (None, f'{api}/api/executions/{eid}/events"'),
        (
            "its frames, folded from the event log",
            f"{api}/api/replay/state?tenant_id=default&organization_id=default&execution_id={eid}"
            f'&as_of_time={as_of}&projection=frames"',
        ),
        ("replay parity of one execution", f"{noetl} replay verify --execution-id {eid}"),
        ("a listener's spool (empty again after the drain)", f"{noetl} spool ls demo/webhooks/standard"),
        ("the runtime holding demo/pubsub/orders", f"curl -s {runtime}/status"),
        (
            "the spans and the counters of every role (the local OpenTelemetry exporter; the execution's trace id "
            "is in its 'trace', and GET /api/traces/<trace id> answers that trace's spans)",
            'tail -n 5 "$NOETL_TELEMETRY_DIR/spans.jsonl" "$NOETL_TELEMETRY_DIR/metrics.jsonl"',
        ),
        ("the rows the frames saved", f"psql '{demo_db}' -c \"{sql}\""),
        ("each role's log", f"ls {logs}/"),
    ]
    lines = ['Inspect each part (first: eval "$(.venv/bin/noetl-cloud local env)"):']
    for comment, command in pairs:
        if comment:
            lines.append(f"  # {comment}")
        lines.append(f"  {command}")
    return "\n".join(lines)


def main(env: Mapping[str, str], options: Options) -> int:
    """Run the demo against the local stack of ``env`` (``NOETL_LOCAL_*``); the exit status."""
    from noetl_cloud.local.stack import DEMO_API_PORT, LocalStack

    def say(line: str) -> None:
        print(line, file=sys.stderr if options.as_json else sys.stdout, flush=True)

    started = time.monotonic()
    stack = LocalStack.from_env(env)
    missing = [r for r in ROLES if r not in stack.available_roles()]
    if missing:
        raise DemoError(f"this checkout lacks the roles {', '.join(missing)} (functions/<role>/main.py)")
    lines: list[str] = []
    stack_env = stack.up(echo=lines.append, roles=list(ROLES))
    fresh = [line.split()[0] for line in lines if " started in " in line]
    say(f"stack: {len(fresh)} components started{' (' + ', '.join(fresh) + ')' if fresh else ''}, the rest reused")
    demo = Demo(stack_env, stack, options, say)
    try:
        # The port the stack's worker allows http tasks to reach (NOETL_HTTP_TOOL_ALLOW).
        with FixtureApi(stack.port_base + DEMO_API_PORT) as fixture:
            summary = demo.run(fixture)
    finally:
        demo.close()
    summary["total_s"] = round(time.monotonic() - started, 1)
    if options.as_json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        say("")
        say(table(summary))
        say("")
        say(inspect_commands(summary, stack.port_base, stack_env["NOETL_DATABASE_URL"], str(stack.state_dir / "logs")))
    if summary["problems"]:
        for problem in summary["problems"]:
            print(f"noetl-cloud: demo: {problem}", file=sys.stderr)
        return 1
    if not options.as_json:
        say(f"\ndemo OK in {summary['total_s']} s")
    return 0


__all__ = ["DemoError", "Options", "main"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(os.environ, Options()))
