"""The console's Spool page in a real headless Chromium against the local stack: a subscription's lanes
and circuit, its dead letters (written to the stack's spool, fake-gcs-server, as the drainer writes them),
"resend" of one (it leaves the dead letters and its execution starts) and "resend all matching" with its
progress. The control plane forwards the page's /api/spool/* calls to the stack's spool drainer. Every
test fails if the page shows an error, throws, logs one, or gets a 4xx/5xx answer.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import create_engine, text

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.local.provision import SPOOL_BUCKET
from noetl_cloud.spool.engine import payload_bytes
from noetl_cloud.spool.gcs import GcsSpool
from noetl_cloud.spool.item import SpoolItem
from noetl_cloud.web.client import ApiClient
from tests.e2e.test_console import WAIT_MS, browser, page, screenshot, work  # noqa: F401 - fixtures

SUBSCRIPTION = "console/spooled"
DOCUMENT = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: console-spooled, path: console/spooled}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/console-spooled
    verify: {type: standard_webhooks, secret: demo_standard_secret, tolerance_s: 300}
  dispatch: {playbook: console/work, payload_from: message.json}
  spool: {mode: buffer_and_ack, backend: gcs, bucket: noetl-local-spool, ordering: none}
"""
REPLAY_WINDOW_S = 24 * 3600


@pytest.fixture(scope="module")
def spooled(work: ApiClient) -> ApiClient:  # noqa: F811
    work.post("/api/catalog", json={"content": DOCUMENT}).raise_for_error()
    return work


@pytest.fixture
def spool(stack_env: dict[str, str]) -> Iterator[GcsSpool]:
    opened = GcsSpool(SPOOL_BUCKET, endpoint=stack_env["STORAGE_EMULATOR_HOST"], project_id="noetl-local")
    yield opened
    opened.close()


def dead_letter(spool: GcsSpool, lane: str, reason: str) -> SpoolItem:
    """A dead letter of ``console/spooled`` as the drainer leaves one: a message of console/work refused
    ``max_replay_attempts`` times, moved under the dead-letter prefix."""
    tag = secrets.token_hex(6)
    payload = payload_bytes({"fail": False, "pause": 0})
    item = SpoolItem.for_payload(
        payload,
        subscription=SUBSCRIPTION,
        lane=lane,
        source="webhook",
        message_id=f"msg-{tag}",
        idempotency_key=f"console-dlq-{tag}",
        recv_seq=time.time_ns() // 1000 + secrets.randbelow(1000),
        attempts=10,
        spooled_at=datetime.now(UTC),
        reason="circuit_open",
        plan={"playbook": "console/work"},
    )
    spool.put_dead(item, payload, reason)
    return item


def until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.2)


def resent_events(stack_env: dict[str, str], item: SpoolItem) -> list[dict[str, Any]]:
    """The ``subscription.message.resent`` events of ``item`` in the event log (stream ``spool/<sub>``)."""
    engine = create_engine(normalize_url(stack_env["NOETL_DATABASE_URL"]))
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT payload FROM event WHERE stream_id = :stream "
                    "AND event_type = 'subscription.message.resent' AND payload->>'message_id' = :message"
                ),
                {"stream": f"spool/{SUBSCRIPTION}", "message": item.message_id},
            )
            return [dict(row[0]) for row in rows]
    finally:
        engine.dispose()


def execution_of(api: ApiClient, item: SpoolItem) -> dict[str, Any]:
    """The execution the replay of ``item`` started: asking again with its dedup key answers ``duplicate``
    with that execution's id (the replay's dedup block is the item's idempotency key)."""
    body = {
        "path": "console/work",
        "workload": {"fail": False, "pause": 0},
        "dedup": {"key": item.idempotency_key, "window_secs": REPLAY_WINDOW_S},
    }
    answer = api.post("/api/execute", json=body).raise_for_error().json
    assert answer["status"] == "duplicate", answer  # the drainer's replay started it, not this call
    execution: dict[str, Any] = api.get(f"/api/executions/{answer['execution_id']}").raise_for_error().json
    return execution


def test_the_spool_page_resends_a_dead_letter_and_its_execution_starts(
    page: Page,  # noqa: F811
    spooled: ApiClient,
    spool: GcsSpool,
    stack_env: dict[str, str],
) -> None:
    lane = f"l-{secrets.token_hex(3)}"
    item = dead_letter(spool, lane, "poison")
    page.goto("/console/#/spool?subscription=console%2Fspooled")
    row = page.locator(f'#spool-subscriptions tr[data-subscription="{SUBSCRIPTION}"]')
    expect(row.locator(".status")).to_have_text("closed", timeout=WAIT_MS)
    dead = page.locator(f'#dead-letters tr[data-message-id="{item.message_id}"]')
    expect(dead).to_have_count(1, timeout=WAIT_MS)
    expect(dead.locator("td").nth(3)).to_have_text("poison")
    screenshot(page, "spool")
    dead.locator('button[data-action="resend"]').click()
    expect(page.locator("#spool-result")).to_contain_text("resent", timeout=WAIT_MS)
    expect(dead).to_have_count(0, timeout=WAIT_MS)  # it left the dead letters
    # the drain the resend started replays it: its lane empties and its execution exists
    until(lambda: spool.list(SUBSCRIPTION, lane) == [], "the resent item is replayed and leaves its lane")
    assert spool.list(SUBSCRIPTION, lane, dlq=True) == []
    execution = execution_of(spooled, item)
    assert execution["status"] in ("started", "completed"), execution
    (event,) = resent_events(stack_env, item)  # the operator's resend is in the log, with who asked
    assert event["dlq_reason"] == "poison" and event["by"] and event["operation_id"] is None


def test_resend_all_matching_runs_as_one_operation_with_its_progress(
    page: Page,  # noqa: F811
    spooled: ApiClient,
    spool: GcsSpool,
) -> None:
    lane = f"l-{secrets.token_hex(3)}"
    items = [dead_letter(spool, lane, "retention_expired") for _ in range(3)]
    other = dead_letter(spool, lane, "poison")  # not matched by the filter: stays
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/console/#/spool?subscription=console%2Fspooled")
    expect(page.locator(f'#dead-letters tr[data-message-id="{items[0].message_id}"]')).to_have_count(1, timeout=WAIT_MS)
    page.fill("#dead-letter-filters input[name=lane]", lane)
    page.fill("#dead-letter-filters input[name=reason]", "retention_expired")
    page.click("#resend-all")
    progress = page.locator("#resend-progress")
    expect(progress).to_have_attribute("data-state", "done", timeout=WAIT_MS)
    expect(progress).to_contain_text("resent 3 of 3 · failed 0")
    screenshot(page, "spool-resend-all")
    for item in items:
        expect(page.locator(f'#dead-letters tr[data-message-id="{item.message_id}"]')).to_have_count(0)
    page.fill("#dead-letter-filters input[name=reason]", "")
    page.click("#dead-letters-filter")
    expect(page.locator(f'#dead-letters tr[data-message-id="{other.message_id}"]')).to_have_count(1)
    until(lambda: spool.list(SUBSCRIPTION, lane) == [], "the resent items are replayed")
    for item in items:
        assert execution_of(spooled, item)["status"] in ("started", "completed")
    spool.delete(spool.list(SUBSCRIPTION, lane, dlq=True)[0])  # leave no dead letter behind
    # drain now: the drainer drains the subscription in the request and says how it ended
    page.locator(f'#spool-subscriptions tr[data-subscription="{SUBSCRIPTION}"] button[data-action="drain"]').click()
    expect(page.locator("#spool-result")).to_contain_text(f"drain of {SUBSCRIPTION}: ", timeout=WAIT_MS)
