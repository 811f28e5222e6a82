"""The summary of a demo run for people: what did not check out, the table, the commands to look closer.

:func:`problems_of` names each check of a run's summary that did not hold (none: the demo succeeded);
:func:`table` and :func:`inspect_commands` are what ``noetl-cloud demo`` prints after the run;
:func:`port_of` is the port (above the stack's base) a role of the local stack answers on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from noetl_cloud.demo import setup


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
    from noetl_cloud.local.layout import ROLE_PORTS

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
