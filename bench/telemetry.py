"""What tracing costs the hot path: CPU of the execute role per ``POST /api/execute``, tracing off
against tracing on (the local exporter, every request sampled, and a 10% sample); and, in this
process, the CPU per request of the web layer's pipeline and per span, off and on.

The execute role runs under gunicorn (the command line of functions/execute/main.py) on a fresh
database of the local stack's PostgreSQL, once per mode, and is driven with single executions from
4 client threads carrying a sampled ``traceparent`` header (as the ingress sends). Counted per
execution: the role's CPU (utime + stime of its process group from ``/proc``, the exporter's thread
included) and the spans the local exporter wrote. Modes alternate over ``--rounds`` rounds and the
median is printed, each beside the off figure of the same round.

    make up && .venv/bin/python bench/telemetry.py [--calls 2000] [--rounds 2]

Prints figures; never fails on timing.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import urllib3

from execute import DB, PLAYBOOK, TOKEN, admin, drive, fresh_database, start_role
from noetl_cloud.local.process import stop_group
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.messaging.pubsub import PubSubPublisher
from noetl_cloud.settings import events_topic_for
from noetl_cloud.telemetry.localexport import SPANS
from peers_common import TICK, group_ticks

MODES = {
    "off": {"NOETL_TRACING": "off", "NOETL_METRICS": "off"},
    "local, all sampled": {"NOETL_TRACING": "local", "NOETL_METRICS": "local", "NOETL_TRACING_SAMPLE_RATIO": "1"},
    "local, 10% of new traces": {
        "NOETL_TRACING": "local",
        "NOETL_METRICS": "local",
        "NOETL_TRACING_SAMPLE_RATIO": "0.1",
    },
}
PORT = 15495


def measure(
    env: dict[str, str], url: str, prefix: str, mode: dict[str, str], calls: int, sampled: bool
) -> tuple[float, float]:
    """(ms of the role's CPU, spans written) per execution in one mode."""
    with tempfile.TemporaryDirectory() as folder:
        pid = start_role({**env, **mode, "NOETL_TELEMETRY_DIR": folder}, url, PORT, prefix)
        http = urllib3.PoolManager(maxsize=8)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        base = f"http://127.0.0.1:{PORT}"
        try:
            registered = http.request(
                "POST", base + "/api/catalog", body=PLAYBOOK, headers={**auth, "Content-Type": "application/yaml"}
            )
            assert registered.status in (200, 201), registered.data

            def single() -> int:
                # A sampled caller's context, as the ingress sends it; without one (the 10% mode) the
                # role's sampler decides on each new trace.
                headers = dict(auth)
                if sampled:
                    headers["traceparent"] = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
                r = http.request(
                    "POST", base + "/api/execute", json={"path": "bench/noop", "workload": {}}, headers=headers
                )
                return 1 if r.status == 202 else 0

            drive(single, 4, 200)  # warm up: connections, caches, the compiled playbook
            time.sleep(1.0)  # the exporter's batch of the warm-up leaves before the reading
            spans = Path(folder) / SPANS
            spans_before = len(spans.read_text().splitlines()) if spans.exists() else 0
            before = group_ticks(pid)
            _seconds, started = drive(single, 4, calls)
            time.sleep(1.5)  # the exporter writes what the window left (its CPU is counted)
            cpu = (group_ticks(pid) - before) / TICK
            written = (len(spans.read_text().splitlines()) if spans.exists() else 0) - spans_before
        finally:
            stop_group(pid)
            http.clear()
    return cpu * 1000 / max(started, 1), written / max(started, 1)


def pipeline_us(mode: dict[str, str], requests: int) -> tuple[float, float]:
    """In this process: µs of CPU per request through the web layer's pipeline (a route that does
    nothing, a sampled ``traceparent``), and per ``telemetry.span`` opened and closed, in one mode;
    the exporter's thread is counted (its batches are flushed inside the reading)."""
    from noetl_cloud import telemetry
    from noetl_cloud.settings import Settings
    from noetl_cloud.web import create_app

    with tempfile.TemporaryDirectory() as folder:
        values = {k.removeprefix("NOETL_").lower(): v for k, v in mode.items()}
        settings = Settings(**values, telemetry_dir=folder, metrics_export_s=3600)
        app = create_app("execute", settings)
        app.post("/api/nothing")(lambda: {"ok": True})
        client = app.test_client()
        sampled = mode.get("NOETL_TRACING_SAMPLE_RATIO", "1") == "1"  # else new traces: the sampler decides
        header = {"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"} if sampled else {}
        for _ in range(500):
            client.post("/api/nothing", headers=header)
        begin = time.process_time()
        for _ in range(requests):
            client.post("/api/nothing", headers=header)
        telemetry.shutdown()  # flush: the export's CPU belongs to the window
        per_request = (time.process_time() - begin) * 1e6 / requests
        telemetry.configure(settings, "execute")
        begin = time.process_time()
        for _ in range(requests):
            with telemetry.span("bench", {"noetl.step": "start"}):
                pass
        telemetry.shutdown()
        per_span = (time.process_time() - begin) * 1e6 / requests
    return per_request, per_span


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=5000, help="in-process requests per mode and round")
    parser.add_argument("--micro-only", action="store_true", help="only the in-process figures")
    args = parser.parse_args()

    print(f"in this process, {args.requests} requests per mode (CPU, the exporter's thread included):")
    for name in MODES:
        rounds = [pipeline_us(MODES[name], args.requests) for _ in range(3)]
        request_us = statistics.median(r for r, _ in rounds)
        span_us = statistics.median(s for _, s in rounds)
        print(f"  {name:<26} {request_us:7.1f} µs per request through the web layer  {span_us:6.2f} µs per span")
    if args.micro_only:
        return

    env = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    url = fresh_database(env["NOETL_DATABASE_URL"])
    prefix = f"bench-{secrets.token_hex(3)}-commands-"
    PubSubPublisher("noetl-local", emulator_host=env["PUBSUB_EMULATOR_HOST"]).ensure_topics(
        [prefix + "shared", events_topic_for(prefix)]
    )
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
    for _ in range(args.rounds):
        for name, mode in MODES.items():
            results[name].append(
                measure(env, url, prefix, mode, args.calls, sampled=name != "local, 10% of new traces")
            )
    admin(url).close()

    print(f"machine: {os.cpu_count()} cores; execute role: gunicorn 2 workers x 8 threads; {args.calls} single")
    print(f"executions per mode and round, {args.rounds} rounds, database {DB}")
    off = statistics.median(cpu for cpu, _ in results["off"])
    for name, rows in results.items():
        cpu = statistics.median(c for c, _ in rows)
        spans = statistics.median(s for _, s in rows)
        print(
            f"{name:<26} {cpu:6.2f} ms CPU per execution ({cpu - off:+.2f} ms vs off)  {spans:.2f} spans per execution"
        )


if __name__ == "__main__":
    main()
