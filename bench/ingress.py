"""Push ingress throughput against same-run baselines, and the ingress role's cold start.

Three figures from one run, each with wrk (``Connection: close``: on 2 cores keep-alive pins
every connection to one gunicorn worker) against gunicorn with 2 workers x 8 threads:

  (a) a bare Flask endpoint that only verifies the HMAC and answers 202 (the baseline);
  (b) the ingress role forwarding to a stand-in control plane that answers 202 at once
      (``bench/standin.py``: one asyncio process, so the figure is the ingress's cost, not a
      second web app's);
  (c) the ingress role forwarding to the real execute role (PostgreSQL + Pub/Sub emulator),
      with the execute role's own single-request rate measured beside it.

Every request of (a), (b) and (c) is a distinct signed delivery (a counter and the run's token in
the body; wrk reads them from a file, ``DELIVERIES_LUA``): the ingress keys replay protection on an
HMAC body's digest, and one body posted again would be answered ``duplicate`` and run nothing.

Goal: b / a >= 0.4 (the forward doubles the HTTP work on the same cores), printed as
``ingress ratio``. Beside each rate, the CPU each server process group spent per request (from
``/proc``, user + system), so a ratio can be read as where the cycles went. Also the ingress
role's cold start: process start to its first 202.

    make up && bash bench/tools.sh && .venv/bin/python bench/ingress.py [--seconds 10]

Prints figures and ratios; never fails on timing.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import urllib3

from noetl_cloud.local.process import group_stats, gunicorn_argv, http_ok, stop_group, wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.messaging.pubsub import PubSubPublisher
from noetl_cloud.settings import events_topic_for

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret"  # noqa: S105 - the benchmark's own throwaway webhook secret
TOKEN = secrets.token_hex(16)
RUN = secrets.token_hex(4)  # in every body: a rerun within the replay window sends none again
THREADS = 2  # wrk -t2
MAX_RATE = 6000  # req/s the pool of signed deliveries is sized for (a few times what 2 cores serve)
PLAYBOOK = (
    "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: noop, path: bench/noop}\n"
    "workflow:\n  - step: start\n    tool: {kind: noop}\n"
)
SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: bench, path: subscriptions/bench}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/bench
    verify: {type: hmac_sha256, header: x-signature, secret: bench}
  dispatch: {playbook: bench/noop, payload_from: message.json}
"""


def gunicorn(chdir: Path, target: str, port: int, env: dict[str, str]) -> int:
    argv = gunicorn_argv(chdir, port=port, target=target)
    return subprocess.Popen(argv, env={**os.environ, **env}, start_new_session=True).pid


@contextmanager
def serving(chdir: Path, target: str, port: int, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """A gunicorn server of ``target``: its URL and process group."""
    pid = gunicorn(chdir, target, port, env)
    try:
        if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz") or _answers(port), timeout=30):
            raise SystemExit(f"{target} did not start")
        yield f"http://127.0.0.1:{port}", pid
    finally:
        stop_group(pid)


@contextmanager
def standing_in(port: int, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """The stand-in control plane (``bench/standin.py``): its URL and process group."""
    pid = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "standin.py"), "--port", str(port)],
        env={**os.environ, **env},
        start_new_session=True,
    ).pid
    try:
        if not wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=30):
            raise SystemExit("the stand-in control plane did not start")
        yield f"http://127.0.0.1:{port}", pid
    finally:
        stop_group(pid)


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of a process group (gunicorn: master and workers)."""
    ticks = sum(int(fields[11]) + int(fields[12]) for fields in group_stats(pgid))  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _answers(port: int) -> bool:
    try:
        urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/", timeout=1, retries=False)
        return True
    except urllib3.exceptions.HTTPError:
        return False


def signed(tag: str) -> tuple[bytes, dict[str, str]]:
    """A delivery no one sent before (``tag`` and the run's token in its body) and its signed headers.
    The ingress keys replay protection on an HMAC body's digest: a body posted again is answered
    200 ``duplicate`` and runs nothing, so a load of one body would measure the replay path."""
    order = {"id": f"{RUN}-{tag}", "items": [1, 2, 3]}
    body = json.dumps({"event": "order.created", "order": order}, separators=(",", ":")).encode()
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-Signature": signature, "Content-Type": "application/json"}


# Each wrk thread takes every THREADS-th line of the deliveries file from its own offset: no body twice.
DELIVERIES_LUA = """\
local started = 0
function setup(thread)
  thread:set("offset", started)
  started = started + 1
end
function init(args)
  signatures, bodies = {}, {}
  for line in io.lines(%s) do
    local signature, body = line:match("^(%%S+) (.*)$")
    signatures[#signatures + 1], bodies[#bodies + 1] = signature, body
  end
  index = offset + 1
end
function request()
  if index > #bodies then index = offset + 1 end  -- exhausted: bench() warns that it wrapped
  local at = index
  index = index + %d
  wrk.headers["X-Signature"] = signatures[at]
  return wrk.format(nil, nil, nil, bodies[at])
end
"""


def deliveries(seconds: int, tag: str) -> tuple[Path, int]:
    """A file of distinct signed deliveries, ``<signature> <body>`` a line, enough for ``seconds`` at MAX_RATE."""
    count = max(seconds, 1) * MAX_RATE
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as out:
        for n in range(count):
            body, headers = signed(f"{tag}-{n}")
            out.write(f"{headers['X-Signature']} {body.decode()}\n")
    return Path(out.name), count


def wrk(
    url: str, seconds: int, body: bytes, headers: dict[str, str], *, unique: str | None = None
) -> tuple[float, int]:
    """Requests/s and the number of non-2xx answers; with ``unique`` (a tag), every request is a
    distinct signed delivery (``body`` and the signature in ``headers`` are not sent then)."""
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(body.decode())}", 'wrk.headers["Connection"] = "close"']
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    pool: tuple[Path, int] | None = deliveries(seconds, unique) if unique is not None else None
    if pool is not None:
        lines.append(DELIVERIES_LUA % (json.dumps(str(pool[0])), THREADS))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lines) + "\n")
    out = subprocess.run(
        ["wrk", f"-t{THREADS}", "-c16", f"-d{seconds}s", "-s", script.name, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script.name)
    rate = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if pool is not None:
        os.unlink(pool[0])
        sent = re.search(r"(\d+) requests in", out)
        if sent and int(sent.group(1)) > pool[1]:
            print(
                f"warning: {url} took {sent.group(1)} requests, more than the {pool[1]} distinct deliveries: "
                "the rest were replays (raise MAX_RATE)"
            )
    return rate, int(errors.group(1)) if errors else 0


def cold_start(port: int, env: dict[str, str]) -> float:
    """Seconds from starting the ingress process to its first 202."""
    http = urllib3.PoolManager()
    started = time.perf_counter()
    pid = gunicorn(ROOT / "functions" / "ingress", "main:app", port, env)
    try:
        while time.perf_counter() - started < 30:
            body, headers = signed(f"cold-{time.perf_counter_ns()}")
            try:
                r = http.request(
                    "POST",
                    f"http://127.0.0.1:{port}/ingress/bench",
                    body=body,
                    headers=headers,
                    timeout=2,
                    retries=False,
                )
                if r.status == 202:
                    return time.perf_counter() - started
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.01)
        raise SystemExit("the ingress never answered 202")
    finally:
        stop_group(pid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    body, headers = signed("template")  # wrk sends distinct deliveries (unique=...), signed alike
    bench = ROOT / "bench"
    base_env = {"BENCH_SECRET": SECRET, "NOETL_LOG_LEVEL": "WARNING"}

    with serving(bench, "ingress_targets:bare", 15501, base_env) as (bare, bare_pid):
        cpu = group_cpu_s(bare_pid)
        a, a_err = wrk(f"{bare}/ingress/bench", args.seconds, body, headers, unique="a")
        a_cpu = (group_cpu_s(bare_pid) - cpu) / max(a * args.seconds, 1)

    with standing_in(15502, base_env) as (standin, standin_pid):
        ingress_env = {**base_env, "NOETL_API_URL": standin, "NOETL_INTERNAL_API_TOKEN": TOKEN}
        with serving(ROOT / "functions" / "ingress", "main:app", 15503, ingress_env) as (ingress, ingress_pid):
            cpu, standin_cpu = group_cpu_s(ingress_pid), group_cpu_s(standin_pid)
            b, b_err = wrk(f"{ingress}/ingress/bench", args.seconds, body, headers, unique="b")
            b_cpu = (group_cpu_s(ingress_pid) - cpu) / max(b * args.seconds, 1)
            b_standin_cpu = (group_cpu_s(standin_pid) - standin_cpu) / max(b * args.seconds, 1)
        start = cold_start(15504, ingress_env)

    stack = LocalStack.from_env(os.environ).up(echo=lambda _line: None)
    prefix = f"bench-{secrets.token_hex(3)}-commands-"
    PubSubPublisher("noetl-local", emulator_host=stack["PUBSUB_EMULATOR_HOST"]).ensure_topics(
        [prefix + "shared", events_topic_for(prefix)]
    )
    execute_env = {
        **stack,
        **base_env,
        "NOETL_INTERNAL_API_TOKEN": TOKEN,
        "NOETL_COMMAND_TOPIC_PREFIX": prefix,
        "NOETL_EVENTS_TOPIC": events_topic_for(prefix),  # own topic, no subscriber: not pushed to the projector
        "NOETL_SECRET_BENCH": SECRET,
        "NOETL_POOLS": "shared",
    }
    with serving(ROOT / "functions" / "execute", "main:app", 15505, execute_env) as (api, _api_pid):
        http = urllib3.PoolManager()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for doc in (PLAYBOOK, SUBSCRIPTION):
            http.request("POST", f"{api}/api/catalog", body=doc, headers={**auth, "Content-Type": "application/yaml"})
        sid = http.request(
            "POST", f"{api}/api/subscriptions/register", json={"path": "subscriptions/bench"}, headers=auth
        ).json()["subscription_id"]
        http.request("POST", f"{api}/api/subscriptions/{sid}/activate", headers=auth)
        execute_rate, e_err = wrk(
            f"{api}/api/execute",
            args.seconds,
            json.dumps({"path": "bench/noop"}).encode(),
            {**auth, "Content-Type": "application/json"},
        )
        with serving(
            ROOT / "functions" / "ingress",
            "main:app",
            15506,
            {**stack, **base_env, "NOETL_API_URL": api, "NOETL_INTERNAL_API_TOKEN": TOKEN},
        ) as (ingress, _ingress_pid):
            c, c_err = wrk(f"{ingress}/ingress/bench", args.seconds, body, headers, unique="c")

    print(f"machine: {os.cpu_count()} cores; gunicorn 2 workers x 8 threads; wrk -t2 -c16, Connection: close")
    print(f"(a) bare verify-and-202 endpoint:          {a:8.0f} req/s  (non-2xx {a_err})")
    print(f"(b) ingress -> stand-in control plane:     {b:8.0f} req/s  (non-2xx {b_err})")
    print(
        f"    CPU per request: bare endpoint {a_cpu * 1e6:.0f} us; ingress {b_cpu * 1e6:.0f} us "
        f"+ stand-in {b_standin_cpu * 1e6:.0f} us"
    )
    print(f"(c) ingress -> real execute role:          {c:8.0f} req/s  (non-2xx {c_err})")
    print(f"    execute role alone, single requests:   {execute_rate:8.0f} req/s  (non-2xx {e_err})")
    print(f"ingress cold start (process start to first 202): {start:.2f} s")
    print(f"ingress ratio: {b / a:.2f} (goal >= 0.4)")


if __name__ == "__main__":
    main()
