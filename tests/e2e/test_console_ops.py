"""The console's operator actions in a real headless Chromium against the local stack: bulk re-run of the
failed executions a filter matches (its progress and the new executions), the catalog editor (a
playbook with an error shows the validator's problem inline; fixed, it registers a new version), and a
payload preview (a cursor loop's frame rows of the demo's playbook as a table). Every test fails if the
page shows an error, throws, or logs one (the editor's test expects exactly the validator's 422).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from noetl_cloud.demo.setup import PLAYBOOK_PATH
from noetl_cloud.web.client import ApiClient
from tests.e2e.test_console import (  # noqa: F401 - fixtures
    WAIT_MS,
    browser,
    check,
    page,
    screenshot,
    start,
    watch,
    work,
)
from tests.e2e.test_console_spool import until

ROOT = Path(__file__).resolve().parents[2]


def child(api: ApiClient, parent: str, **workload: Any) -> str:
    body = {"path": "console/work", "workload": workload, "parent_execution_id": parent}
    return str(api.post("/api/execute", json=body).raise_for_error().json["execution_id"])


def test_bulk_rerun_of_the_failed_executions_a_filter_matches_shows_progress_and_the_new_ones(
    page: Page,  # noqa: F811
    work: ApiClient,  # noqa: F811
) -> None:
    # A batch of its own: the list filtered by the parent's id holds only these executions.
    parent = start(work)
    failing = [child(work, parent, fail=True) for _ in range(3)]
    done = child(work, parent)

    def ended() -> bool:
        statuses = {work.get(f"/api/executions/{eid}").json["status"] for eid in [*failing, done]}
        return "started" not in statuses

    until(ended, "the batch to end")
    page.goto(f"/console/#/?status=failed&parent={parent}")
    expect(page.locator("#executions tbody tr")).to_have_count(3, timeout=WAIT_MS)
    expect(page.locator("#rerun-matching")).to_have_text("Re-run failed matching")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#rerun-matching")
    progress = page.locator("#rerun-progress")
    expect(progress).to_have_attribute("data-state", "done", timeout=WAIT_MS)
    expect(progress).to_contain_text("re-ran 3 of 3 · started 3 · duplicates 0 · failed 0")
    items = page.locator("#rerun-results li")
    expect(items).to_have_count(3)
    assert sorted(items.evaluate_all("items => items.map(i => i.dataset.rerunOf)")) == sorted(failing)
    new = items.locator("a.new").evaluate_all("links => links.map(a => a.textContent)")
    assert len(set(new)) == 3 and not set(new) & set(failing)
    for eid in new:
        detail = work.get(f"/api/executions/{eid}").raise_for_error().json
        assert detail["meta"]["rerun_of"] in failing and detail["workload"]["fail"] is True
    screenshot(page, "bulk-rerun")

    op = work.get(f"/api/executions/reruns/{progress.get_attribute('data-operation-id')}").raise_for_error().json
    assert op["state"] == "done" and sorted(r["execution_id"] for r in op["results"]) == sorted(new)
    page.locator("#rerun-results li a.new").first.click()  # a new execution's page links back
    expect(page.locator("#execution-summary")).to_contain_text("Re-run of", timeout=WAIT_MS)


FIXED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: edited
  path: console/edited
workload:
  nonce: NONCE
workflow:
  - step: start
    tool:
      kind: noop
    next:
      spec: {mode: exclusive}
      arcs:
        - step: end
  - step: end
    tool:
      kind: noop
"""
# A step-level `when` (an older DSL's): the validator names the canonical forms in its problem.
BROKEN = FIXED.replace("  - step: end\n    tool:", '  - step: end\n    when: "{{ workload.nonce }}"\n    tool:')


@pytest.fixture
def editor(browser: Browser, stack_env: dict[str, str]) -> Iterator[Page]:  # noqa: F811
    """A page whose only expected failure is the validator's 422 for the broken document."""
    context = browser.new_context(
        base_url=stack_env["NOETL_API_URL"],
        extra_http_headers={"Authorization": f"Bearer {stack_env['NOETL_INTERNAL_API_TOKEN']}"},
        viewport={"width": 1280, "height": 1000},
    )
    opened = context.new_page()
    problems = watch(opened)
    yield opened
    expected = [p for p in problems if "422" in p and ("/api/catalog" in p or "Failed to load resource" in p)]
    assert len(expected) <= 2, problems  # the one refused registration (its response and Chromium's log line)
    try:
        check(opened, [p for p in problems if p not in expected])
    finally:
        context.close()


def test_the_catalog_editor_shows_the_validators_errors_inline_and_registers_a_fixed_version(
    editor: Page,
    work: ApiClient,  # noqa: F811
) -> None:
    nonce = secrets.token_hex(4)  # new versions on a stack this test ran on before
    first, broken, fixed = (
        doc.replace("NONCE", nonce) for doc in (FIXED.replace("nonce:", "first: 1\n  nonce:"), BROKEN, FIXED)
    )
    registered = work.post("/api/catalog", json={"content": first}).raise_for_error().json
    editor.goto(f"/console/#/catalog?path=console/edited&version={registered['version']}")
    expect(editor.locator('#catalog tr[data-path="console/edited"]')).to_be_visible(timeout=WAIT_MS)
    yaml = editor.locator("#catalog-yaml")
    expect(yaml).to_have_value(first, timeout=WAIT_MS)
    expect(editor.locator("#catalog-version")).to_have_value(str(registered["version"]))

    yaml.fill(broken)
    editor.click("#catalog-register")
    problems = editor.locator("#catalog-problems")
    expect(problems).to_be_visible(timeout=WAIT_MS)
    expect(editor.locator("#catalog-problems-title")).to_contain_text("validation_failed")
    rows = editor.locator("#catalog-problems tbody tr")
    expect(rows.first).to_be_visible()
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.field)") == ["workflow.1.when"]
    expect(rows.first).to_contain_text("next.arcs[].when")  # the canonical form, as the API words it
    expect(rows.first).to_contain_text("non_canonical")
    expect(editor.locator("#error")).to_be_hidden()  # inline, not the error banner
    screenshot(editor, "catalog-editor-error")

    yaml.fill(fixed)
    editor.click("#catalog-register")
    result = editor.locator("#catalog-result")
    expect(result).to_have_attribute("data-version", str(registered["version"] + 1), timeout=WAIT_MS)
    expect(result).to_contain_text(f"registered console/edited version {registered['version'] + 1}")
    expect(problems).to_be_hidden()
    expect(editor.locator("#catalog-version")).to_have_value(str(registered["version"] + 1))
    expect(editor.locator('#catalog tr[data-path="console/edited"] .version')).to_have_text(
        str(registered["version"] + 1)
    )
    latest = work.get("/api/catalog/console/edited").raise_for_error().json
    assert latest["version"] == registered["version"] + 1 and latest["content"] == fixed
    screenshot(editor, "catalog-editor")


def _frame_execution(api: ApiClient) -> tuple[str, str] | None:
    """A completed execution of the demo's playbook and the event id of a frame that saved rows."""
    listing = api.get(f"/api/executions?path={PLAYBOOK_PATH}&status=completed&limit=20").raise_for_error().json
    for item in listing["items"]:
        events = api.get(f"/api/executions/{item['execution_id']}/events").raise_for_error().json["events"]
        for event in events:
            payload = event["payload"] or {}
            if event["event_type"] == "frame.committed" and payload.get("row_count"):
                return item["execution_id"], event["event_id"]
    return None


@pytest.fixture(scope="module")
def demo_frame(stack_api: ApiClient, stack_env: dict[str, str]) -> tuple[str, str]:
    """The demo's data: an execution of its cursor loop (`make up` runs the demo; run here when none)."""
    found = _frame_execution(stack_api)
    if found is None:
        env: dict[str, Any] = {**os.environ, **stack_env}
        env.setdefault("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state"))
        command = [str(Path(sys.executable).with_name("noetl-cloud")), "demo", "--webhooks=1", "--messages=1"]
        done = subprocess.run([*command, "--spooled=1", "--timeout=120"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        found = _frame_execution(stack_api)
    assert found is not None, "the demo left no execution whose frames saved rows"
    return found


def test_an_execution_with_a_payload_ref_shows_a_preview_table(
    page: Page,  # noqa: F811
    stack_api: ApiClient,
    demo_frame: tuple[str, str],
) -> None:
    eid, event_id = demo_frame
    page.goto(f"/console/#/executions/{eid}")
    committed = page.locator(f'#timeline tr[data-event-id="{event_id}"]')
    expect(committed).to_have_attribute("data-payload-refs", "1", timeout=WAIT_MS)
    committed.click()
    block = page.locator("#timeline tr.payload .payload-preview")
    expect(block).to_have_attribute("data-kind", "table", timeout=WAIT_MS)
    header = block.locator("thead th").evaluate_all("cells => cells.map(c => c.textContent)")
    assert {"order_id", "customer", "amount_cents"} <= set(header), header
    event = next(e for e in stack_api.get(f"/api/executions/{eid}/events").json["events"] if e["event_id"] == event_id)
    expect(block.locator("tbody tr")).to_have_count(int(event["payload"]["row_count"]))
    expect(block).to_contain_text("application/vnd.apache.arrow.stream")
    screenshot(page, "payload-preview")
