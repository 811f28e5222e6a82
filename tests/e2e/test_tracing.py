"""Acceptance of issue #24 item 4: a signed webhook on the local stack is one OpenTelemetry trace from
the ingress to its last step, read back from the local exporter (``local/.state/telemetry``), and
the console's trace link (``GET /api/traces/<id>``) answers the same spans."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import urllib3
from standardwebhooks.webhooks import Webhook

from noetl_cloud.local.layout import ROLE_PORTS
from noetl_cloud.local.process import wait_until
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.web.client import ApiClient
from tests.e2e.telemetry_files import metric_total, trace_spans

WORK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: work
  path: tracing/work
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main():
            return {"traced": True}
    next:
      spec: {mode: exclusive}
      arcs:
        - step: end
  - step: end
    tool:
      kind: noop
"""
HOOK = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: tracing-hook, path: tracing/hook}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/tracing-hook
    verify: {type: standard_webhooks, secret: demo_standard_secret, tolerance_s: 300}
  dispatch: {playbook: tracing/work, payload_from: message.json}
"""
HTTP = urllib3.PoolManager(retries=False)


@pytest.fixture(scope="module")
def hook(stack_api: ApiClient, stack_env: dict[str, str]) -> str:
    """The ingress URL of an active listener ``tracing-hook`` running ``tracing/work``."""
    if stack_env.get("NOETL_TRACING") != "local":
        pytest.fail("the local stack runs without tracing (NOETL_LOCAL_TRACING); this test needs it on")
    for content in (WORK, HOOK):
        stack_api.post("/api/catalog", json={"content": content}).raise_for_error()
    view = stack_api.post("/api/subscriptions/register", json={"path": "tracing/hook"}).raise_for_error().json
    if view["state"] == "registered":
        stack_api.post(f"/api/subscriptions/{view['subscription_id']}/activate").raise_for_error()
    elif view["state"] == "paused":
        stack_api.post(f"/api/subscriptions/{view['subscription_id']}/resume").raise_for_error()
    port = LocalStack.from_env({**os.environ, **stack_env}).port_base + ROLE_PORTS["ingress"]
    return f"http://127.0.0.1:{port}/ingress/tracing-hook"


def signed(body: bytes, secret: str) -> dict[str, str]:
    msg_id = f"msg_{time.time_ns()}"
    now = int(time.time())
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": Webhook(secret).sign(msg_id, datetime.fromtimestamp(now, UTC), body.decode()),
    }


@pytest.fixture(scope="module")
def webhook(hook: str, stack_api: ApiClient, stack_env: dict[str, str]) -> tuple[str, str]:
    """One signed delivery to ``tracing-hook``, run to its end: (execution id, its trace id)."""
    secret = (Path(stack_env["NOETL_SECRETS_DIR"]) / "demo_standard_secret").read_text().strip()
    body = json.dumps({"n": 21}).encode()
    answer = HTTP.request("POST", hook, body=body, headers=signed(body, secret))
    assert answer.status == 202, answer.data
    execution_id = str(json.loads(answer.data)["execution_id"])

    def execution() -> dict[str, Any]:
        return dict(stack_api.get(f"/api/executions/{execution_id}").raise_for_error().json)

    assert wait_until(lambda: execution()["status"] in ("completed", "failed"), timeout=60)
    detail = execution()
    assert detail["status"] == "completed", detail
    # The execution records the trace it belongs to (the console shows and links it).
    return execution_id, str(detail["trace"]["traceparent"].split("-")[1])


def test_a_webhook_is_one_trace_from_the_ingress_to_its_last_step(
    webhook: tuple[str, str], stack_api: ApiClient, stack_env: dict[str, str]
) -> None:
    execution_id, trace_id = webhook

    folder = Path(stack_env["NOETL_TELEMETRY_DIR"])

    def names() -> Counter[str]:
        return Counter(s["name"] for s in trace_spans(folder, trace_id))

    # Spans reach the file within the exporters' delay, each process on its own schedule (the start and
    # the reports may be served by different gunicorn workers of execute): wait for the start's span
    # and the last step's report. A child span ends (and may be exported) before its parent, so wait for
    # both commands too: the worker's export of the "end" command can come a batch after its tool call's.
    def all_there() -> bool:
        seen = names()
        return (
            seen["POST /ingress/<listener:listener>"] >= 1
            and seen["ingress.forward"] >= 1
            and seen["POST /api/execute"] >= 1
            and seen["POST /api/events"] >= 2
            and seen["worker.command"] >= 2
            and seen["tool.python"] >= 1
            and seen["tool.noop"] >= 1
        )

    assert wait_until(all_there, timeout=30), names()
    spans = trace_spans(folder, trace_id)
    by_id = {s["span_id"]: s for s in spans}
    named = {s["name"]: s for s in spans}

    # One root: the ingress's receive span (the public edge starts the trace); every other span's
    # parent is a span of the same trace: one connected tree.
    roots = [s for s in spans if s["parent_span_id"] is None]
    assert [(r["name"], r["service"], r["kind"]) for r in roots] == [
        ("POST /ingress/<listener:listener>", "noetl-ingress", "SERVER")
    ]
    orphans = [(s["name"], s["service"]) for s in spans if s is not roots[0] and s["parent_span_id"] not in by_id]
    assert orphans == []

    # receive -> verify, forward -> POST /api/execute on the control plane -> each command on the worker.
    receive, forward = named["POST /ingress/<listener:listener>"], named["ingress.forward"]
    assert named["ingress.verify"]["parent_span_id"] == receive["span_id"]
    assert named["ingress.verify"]["attributes"]["noetl.verify.type"] == "standard_webhooks"
    assert forward["parent_span_id"] == receive["span_id"]
    execute = named["POST /api/execute"]
    assert (execute["service"], execute["parent_span_id"]) == ("noetl-execute", forward["span_id"])
    assert execute["attributes"]["noetl.execution_id"] == execution_id
    commands = [s for s in spans if s["name"] == "worker.command"]
    assert sorted(c["attributes"]["noetl.step"] for c in commands) == ["end", "start"]
    assert {c["service"] for c in commands} == {"noetl-worker"}
    # Each tool call is a child of its command, and each report a child of the command that sent it.
    commands_by_id = {c["span_id"]: c for c in commands}
    assert commands_by_id[named["tool.python"]["parent_span_id"]]["attributes"]["noetl.step"] == "start"
    assert commands_by_id[named["tool.noop"]["parent_span_id"]]["attributes"]["noetl.step"] == "end"
    claims = [s for s in spans if s["name"] == "POST /api/commands/<int:command_id>/claim"]
    assert claims and all(c["parent_span_id"] == forward["span_id"] for c in claims)  # the notified command's
    reports = [s for s in spans if s["name"] == "POST /api/events"]
    assert {r["parent_span_id"] for r in reports} == set(commands_by_id)
    assert all(s["end_ns"] >= s["start_ns"] for s in spans)

    # The console's trace link answers the same trace.
    linked = stack_api.get(f"/api/traces/{trace_id}").raise_for_error().json
    assert {s["span_id"] for s in linked["spans"]} >= {s["span_id"] for s in spans}


def test_the_projectors_folds_of_the_execution_join_its_trace(
    webhook: tuple[str, str], stack_env: dict[str, str]
) -> None:
    """The events mirror carries the span of the control-plane request that wrote the events: each
    ``projector.apply`` of the execution is a child of one of its execute role's spans."""
    _execution_id, trace_id = webhook
    folder = Path(stack_env["NOETL_TELEMETRY_DIR"])

    def joined() -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        spans = trace_spans(folder, trace_id)
        by_id = {s["span_id"]: s for s in spans}
        return [(s, by_id.get(s["parent_span_id"])) for s in spans if s["name"] == "projector.apply"]

    assert wait_until(lambda: bool(joined()) and all(parent for _s, parent in joined()), timeout=30), joined()
    for apply, parent in joined():
        assert apply["service"] == "noetl-projector"
        assert parent is not None and parent["service"] == "noetl-execute", parent


def test_the_ingress_counts_through_opentelemetry_and_serves_no_metrics_page(
    hook: str, stack_env: dict[str, str]
) -> None:
    assert HTTP.request("GET", hook.split("/ingress/")[0] + "/metrics").status == 404
    folder = Path(stack_env["NOETL_TELEMETRY_DIR"])
    before = metric_total(folder, "noetl.ingress_received", listener="tracing-hook")
    body = b"{}"
    assert HTTP.request("POST", hook, body=body, headers={"Content-Type": "application/json"}).status == 401
    rejected = metric_total(folder, "noetl.ingress_rejected", listener="tracing-hook")
    assert wait_until(
        lambda: metric_total(folder, "noetl.ingress_received", listener="tracing-hook") > before, timeout=30
    )
    assert wait_until(
        lambda: metric_total(folder, "noetl.ingress_rejected", listener="tracing-hook") > rejected, timeout=30
    )


def test_the_console_links_the_execution_to_its_trace(webhook: tuple[str, str], stack_env: dict[str, str]) -> None:
    from playwright.sync_api import expect, sync_playwright

    execution_id, trace_id = webhook
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("no chromium on PATH: `make test` installs it (bash local/prerequisites.sh --browser)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            context = browser.new_context(
                base_url=stack_env["NOETL_API_URL"],
                extra_http_headers={"Authorization": f"Bearer {stack_env['NOETL_INTERNAL_API_TOKEN']}"},
            )
            page = context.new_page()
            page.goto(f"/console/#/executions/{execution_id}")
            link = page.locator("#execution-trace")
            expect(link).to_have_text(trace_id, timeout=30_000)
            assert link.get_attribute("href") == f"/api/traces/{trace_id}"
            answer = page.request.get(f"/api/traces/{trace_id}")
            assert answer.status == 200
            assert {s["trace_id"] for s in answer.json()["spans"]} == {trace_id}
        finally:
            browser.close()
