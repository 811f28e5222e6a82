"""The web console in a real headless Chromium (the distribution's, ``make test`` installs it) against the
local stack's control plane: the list and its filters, an execution's timeline and waterfall, the follow
mode, and the internal auth in front of it. Every test fails if the page shows an error, throws, or logs
one to its console.

Screenshots go to ``CONSOLE_SCREENSHOTS`` when it is set (docs/console.md shows them).
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from noetl_cloud.console.proxy import ConsoleProxy
from noetl_cloud.web.client import ApiClient, static_token

WORK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: work
  path: console/work
workload:
  fail: false
  pause: 0
workflow:
  - step: start
    tool:
      kind: python
      args: { fail: "{{ workload.fail }}", pause: "{{ workload.pause }}" }
      code: |
        def main(fail, pause):
            import time
            time.sleep(float(pause))
            if fail:
                raise RuntimeError("asked to fail")
            return {"slept": pause}
    next:
      spec: {mode: exclusive}
      arcs:
        - step: end
  - step: end
    tool:
      kind: noop
"""
WAIT_MS = 60_000


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("no chromium on PATH: `make test` installs it (bash local/prerequisites.sh --browser)")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def work(stack_api: ApiClient) -> ApiClient:
    stack_api.post("/api/catalog", json={"content": WORK}).raise_for_error()
    return stack_api


def start(api: ApiClient, path: str = "console/work", **workload: Any) -> str:
    body = {"path": path, "workload": workload}
    return str(api.post("/api/execute", json=body).raise_for_error().json["execution_id"])


def watch(page: Page) -> list[str]:
    """What goes wrong on ``page``: uncaught errors, console errors, 4xx/5xx answers."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("response", lambda r: problems.append(f"{r.status} from {r.url}") if r.status >= 400 else None)
    return problems


def check(page: Page, problems: list[str]) -> None:
    shown = page.locator("#error")
    if shown.is_visible():
        problems.append(f"the page shows an error: {shown.text_content()}")
    assert problems == []


@pytest.fixture
def page(browser: Browser, stack_env: dict[str, str]) -> Iterator[Page]:
    context = browser.new_context(
        base_url=stack_env["NOETL_API_URL"],
        extra_http_headers={"Authorization": f"Bearer {stack_env['NOETL_INTERNAL_API_TOKEN']}"},
        viewport={"width": 1280, "height": 860},
    )
    opened = context.new_page()
    problems = watch(opened)
    yield opened
    try:
        check(opened, problems)
    finally:
        context.close()


@pytest.fixture(scope="module")
def proxy(stack_env: dict[str, str]) -> Iterator[ConsoleProxy]:
    started = ConsoleProxy(stack_env["NOETL_API_URL"], static_token(stack_env["NOETL_INTERNAL_API_TOKEN"])).start()
    yield started
    started.close()


def screenshot(page: Page, name: str) -> None:
    folder = os.environ.get("CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_the_console_is_behind_the_internal_auth(stack_env: dict[str, str]) -> None:
    base = stack_env["NOETL_API_URL"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/console/", timeout=10)  # noqa: S310 - the stack's http URL
    assert refused.value.code == 401
    token = stack_env["NOETL_INTERNAL_API_TOKEN"]
    request = urllib.request.Request(f"{base}/console/", headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the stack's http URL
        assert answer.status == 200 and b"<title>NoETL Cloud console</title>" in answer.read()
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]


def test_the_list_shows_executions_newest_first_and_filters_them(page: Page, work: ApiClient) -> None:
    done, failed = start(work), start(work, fail=True)
    page.goto("/console/")
    rows = page.locator("#executions tbody tr")
    expect(page.locator(f'tr[data-execution-id="{failed}"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f'tr[data-execution-id="{done}"]')).to_be_visible()
    order = rows.evaluate_all("rows => rows.map(r => r.dataset.executionId)")
    assert order.index(failed) < order.index(done)  # newest first
    expect(page.locator(f'tr[data-execution-id="{failed}"] .status')).to_have_text("failed", timeout=WAIT_MS)
    expect(page.locator(f'tr[data-execution-id="{done}"] .status')).to_have_text("completed", timeout=WAIT_MS)
    screenshot(page, "executions")

    page.select_option("#filters select[name=status]", "failed")
    page.fill("#filters input[name=path]", "console/work")
    page.click("#filters button[type=submit]")
    expect(page).to_have_url("/console/#/?status=failed&path=console%2Fwork", timeout=WAIT_MS)
    expect(page.locator(f'tr[data-execution-id="{done}"]')).to_have_count(0, timeout=WAIT_MS)
    expect(page.locator(f'tr[data-execution-id="{failed}"]')).to_be_visible()
    statuses = page.locator("#executions tbody tr").evaluate_all("rows => rows.map(r => r.dataset.status)")
    assert statuses and set(statuses) == {"failed"}


def test_the_list_updates_live_when_an_execution_starts(page: Page, work: ApiClient) -> None:
    page.goto("/console/#/?path=console/work")
    expect(page.locator("#executions")).to_have_attribute("data-loaded", "true", timeout=WAIT_MS)
    fresh = start(work)
    expect(page.locator(f'tr[data-execution-id="{fresh}"]')).to_be_visible(timeout=WAIT_MS)


def test_an_execution_page_follows_it_to_its_end_with_timeline_and_waterfall(page: Page, work: ApiClient) -> None:
    eid = start(work, pause=1.5)
    page.goto(f"/console/#/executions/{eid}")
    expect(page.locator("#execution-id")).to_have_text(eid)
    expect(page.locator('#timeline tr[data-event-type="playbook.started"]')).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator('#timeline tr[data-event-type="playbook.completed"]')).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#execution-status")).to_have_text("completed", timeout=WAIT_MS)
    expect(page.locator("#timeline")).to_have_attribute("data-ended", "true", timeout=WAIT_MS)
    types = page.locator("#timeline tbody tr.event").evaluate_all("rows => rows.map(r => r.dataset.eventType)")
    api_types = [e["event_type"] for e in work.get(f"/api/executions/{eid}/events").json["events"]]
    assert types == api_types  # every event once, in log order, though most arrived by the long poll
    expect(page.locator('#waterfall .row[data-span="start"]')).to_have_count(1)
    expect(page.locator('#waterfall .row[data-span="end"]')).to_have_count(1)
    expect(page.locator('#waterfall .row[data-span="start"] .bar')).to_have_class("bar ok")

    page.locator('#timeline tr[data-event-type="task.done"]').first.click()
    expect(page.locator("#timeline tr.payload pre")).to_contain_text('"slept": 1.5')
    screenshot(page, "execution")


def test_time_travel_shows_the_replayed_state_at_the_cutoff_and_verifies_parity(
    page: Page, work: ApiClient, stack_env: dict[str, str]
) -> None:
    eid = start(work)
    page.goto(f"/console/#/executions/{eid}")
    expect(page.locator("#timeline")).to_have_attribute("data-ended", "true", timeout=WAIT_MS)
    status = page.locator('#replay-summary dd[data-field="Status"]')
    expect(status).to_have_text("completed", timeout=WAIT_MS)  # the slider starts at the last event
    expect(page.locator("#replay-commands tbody tr")).to_have_count(2)

    slider = page.locator("#cutoff")
    slider.focus()
    page.keyboard.press("Home")  # the first event: playbook.started
    expect(page.locator("#cutoff-label")).to_contain_text("playbook.started")
    expect(status).to_have_text("running", timeout=WAIT_MS)
    expect(page.locator("#replay-commands tbody tr")).to_have_count(0)
    first = page.locator("#time-travel").get_attribute("data-cutoff")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")  # step.started, command.issued: one command, issued
    expect(page.locator('#replay-commands tbody tr[data-command-status="issued"]')).to_have_count(1, timeout=WAIT_MS)
    assert page.locator("#time-travel").get_attribute("data-cutoff") != first

    projector_caught_up(work, stack_env, eid)
    page.click("#verify")
    expect(page.locator("#verify-result.parity-ok")).to_contain_text("parity ok", timeout=WAIT_MS)
    screenshot(page, "time-travel")


def projector_caught_up(api: ApiClient, env: dict[str, str], eid: str) -> None:
    """Wait (bounded) until the projector folded every event of ``eid``: parity is then a property to
    verify, not a race with the projector's lag."""
    query = f"tenant_id=default&organization_id=default&execution_id={eid}"
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        if api.get(f"/api/replay/verify?{query}").raise_for_error().json["ok"]:
            return
        time.sleep(0.2)
    pytest.fail(f"the projector did not catch up with execution {eid}")


def test_a_failed_execution_shows_its_error_and_its_failed_step_and_is_rerun(page: Page, work: ApiClient) -> None:
    eid = start(work, fail=True)
    page.goto(f"/console/#/executions/{eid}")
    expect(page.locator("#execution-status")).to_have_text("failed", timeout=WAIT_MS)
    expect(page.locator("#execution-error")).to_contain_text("asked to fail", timeout=WAIT_MS)
    expect(page.locator('#waterfall .row[data-span="start"] .bar')).to_have_class("bar error", timeout=WAIT_MS)
    bar = page.locator('#waterfall .row[data-span="start"] .bar').bounding_box()
    track = page.locator('#waterfall .row[data-span="start"] .track').bounding_box()
    assert bar and track and track["x"] <= bar["x"] and bar["x"] + bar["width"] <= track["x"] + track["width"] + 1
    assert abs(bar["y"] - track["y"]) < 1 and bar["height"] <= track["height"]  # drawn inside its track
    screenshot(page, "failed-execution")

    page.click("#rerun")  # a new execution with the same input: it fails the same way
    expect(page).not_to_have_url(f"/console/#/executions/{eid}", timeout=WAIT_MS)
    expect(page.locator("#execution-summary a", has_text=eid)).to_be_visible(timeout=WAIT_MS)  # "Re-run of"
    expect(page.locator("#execution-status")).to_have_text("failed", timeout=WAIT_MS)
    rerun = page.locator("#execution-id").text_content()
    assert rerun and rerun != eid
    detail = work.get(f"/api/executions/{rerun}").raise_for_error().json
    assert detail["meta"]["rerun_of"] == eid and detail["workload"]["fail"] is True


def test_an_unknown_execution_is_an_error_on_the_page(browser: Browser, stack_env: dict[str, str]) -> None:
    context = browser.new_context(
        base_url=stack_env["NOETL_API_URL"],
        extra_http_headers={"Authorization": f"Bearer {stack_env['NOETL_INTERNAL_API_TOKEN']}"},
    )
    try:
        page = context.new_page()
        page.goto("/console/#/executions/12345")
        expect(page.locator("#error")).to_contain_text("execution_not_found", timeout=WAIT_MS)
    finally:
        context.close()


def test_through_the_proxy_a_browser_without_credentials_opens_the_console_and_acts(
    browser: Browser, proxy: ConsoleProxy, work: ApiClient, hook: dict[str, Any]
) -> None:
    eid = start(work)
    context = browser.new_context(base_url=f"http://127.0.0.1:{proxy.port}")
    try:
        opened = context.new_page()
        problems = watch(opened)
        opened.goto("/console")  # the control plane's redirect to /console/ passes through
        opened.locator(f'tr[data-execution-id="{eid}"] a').click(timeout=WAIT_MS)
        expect(opened.locator("#execution-status")).to_have_text("completed", timeout=WAIT_MS)
        opened.goto("/console/#/subscriptions")  # a POST through the proxy: the console's own Origin
        row = opened.locator('#subscriptions tr[data-subscription-path="console/hook"]')
        row.locator('button[data-action="pause"]').click(timeout=WAIT_MS)
        expect(row.locator(".status")).to_have_text("paused", timeout=WAIT_MS)
        row.locator('button[data-action="resume"]').click()
        expect(row.locator(".status")).to_have_text("active", timeout=WAIT_MS)
        check(opened, problems)
    finally:
        context.close()


def test_the_proxy_forwards_its_loopback_host_only_and_posts_of_the_console_only(proxy: ConsoleProxy) -> None:
    base = f"http://127.0.0.1:{proxy.port}"

    def status(path: str, method: str = "GET", host: str | None = None, origin: str | None = None) -> int:
        headers = {"Host": host} if host else {}
        if origin:
            headers["Origin"] = origin
        data = b"{}" if method == "POST" else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(base + path, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the proxy's http URL
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return refused.code

    assert status("/api/executions?limit=1") == 200
    assert status("/api/executions?status=running") == 400  # the API's answer, passed through
    assert status("/api/subscriptions/1/pause", method="POST") == 403  # no Origin: not the console
    assert status("/api/subscriptions/1/pause", method="POST", origin="https://elsewhere.example") == 403
    assert status("/api/subscriptions/1/pause", method="POST", origin=base) == 404  # forwarded: no such subscription
    assert status("/api/executions", method="DELETE") == 405
    assert status("/healthz") == 404
    assert status("/api/executions?limit=1", host=f"rebound.example:{proxy.port}") == 403


SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: console-hook, path: console/hook}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/console-hook
    verify: {type: standard_webhooks, secret: demo_standard_secret, tolerance_s: 300}
  dispatch: {playbook: console/work, payload_from: message.json}
"""


@pytest.fixture(scope="module")
def hook(work: ApiClient) -> dict[str, Any]:
    """An active subscription of the console's own (console/hook)."""
    work.post("/api/catalog", json={"content": SUBSCRIPTION}).raise_for_error()
    view: dict[str, Any] = (
        work.post("/api/subscriptions/register", json={"path": "console/hook"}).raise_for_error().json
    )
    if view["state"] == "registered":
        view = work.post(f"/api/subscriptions/{view['subscription_id']}/activate").raise_for_error().json
    elif view["state"] == "paused":
        view = work.post(f"/api/subscriptions/{view['subscription_id']}/resume").raise_for_error().json
    return view


def test_subscriptions_show_their_state_and_pause_and_resume(page: Page, hook: dict[str, Any], work: ApiClient) -> None:
    page.goto("/console/#/subscriptions")
    row = page.locator('#subscriptions tr[data-subscription-path="console/hook"]')
    expect(row.locator(".status")).to_have_text("active", timeout=WAIT_MS)
    row.locator('button[data-action="pause"]').click()
    expect(row.locator(".status")).to_have_text("paused", timeout=WAIT_MS)
    state = work.get(f"/api/subscriptions/{hook['subscription_id']}").raise_for_error().json["state"]
    assert state == "paused"
    screenshot(page, "subscriptions")
    row.locator('button[data-action="resume"]').click()
    expect(row.locator(".status")).to_have_text("active", timeout=WAIT_MS)
    assert work.get(f"/api/subscriptions/{hook['subscription_id']}").raise_for_error().json["state"] == "active"
    row.locator("a", has_text="executions").click()
    expect(page).to_have_url("/console/#/?subscription=console%2Fhook", timeout=WAIT_MS)
    expect(page.locator("#filters input[name=subscription]")).to_have_value("console/hook")
