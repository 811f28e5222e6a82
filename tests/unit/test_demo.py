"""The demo's own pieces without a stack: its signatures verify at the ingress's verifier, its fixture
API pages exactly through each batch, its package data is a valid playbook and valid subscriptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
import yaml

from noetl_cloud.demo import setup
from noetl_cloud.demo.fixture import FixtureApi, orders_of
from noetl_cloud.demo.senders import sign
from noetl_cloud.ingress.verify import BadSignature, VerifyConfig, verify
from noetl_cloud.spec.playbook import PlaybookDoc
from noetl_cloud.spec.subscription import SubscriptionDoc

SECRETS = {
    "hmac_sha256": "a" * 64,
    "github": "b" * 64,
    "standard_webhooks": "whsec_c2VjcmV0LWZvci10aGUtZGVtby10ZXN0cy0xMjM=",
}


def _subscription(item: setup.Listener) -> SubscriptionDoc:
    return SubscriptionDoc.model_validate(yaml.safe_load(setup.resource(item.resource)))


@pytest.mark.parametrize("item", setup.LISTENERS, ids=lambda item: item.scheme)
def test_each_listener_accepts_what_the_demo_signs_and_refuses_a_changed_body(item: setup.Listener) -> None:
    doc = _subscription(item)
    assert doc.spec.ingress is not None and doc.spec.ingress.verify is not None
    config = VerifyConfig.from_mapping(doc.spec.ingress.verify.model_dump(exclude_none=True))
    body = json.dumps({"batch": "r-1", "n": 1}).encode()
    headers = sign(item.scheme, SECRETS[item.scheme], body, message_id="msg-1", now=1_700_000_000)
    identity = verify(body, headers, config, SECRETS[item.scheme], now=lambda: 1_700_000_010)
    assert identity.scheme == item.scheme
    if item.scheme != "hmac_sha256":  # the two schemes with a delivery id carry the demo's
        assert identity.message_id == "msg-1"
    with pytest.raises(BadSignature):
        verify(body + b" ", headers, config, SECRETS[item.scheme], now=lambda: 1_700_000_010)


def test_the_fixture_pages_through_every_order_of_a_batch_once() -> None:
    http = urllib3.PoolManager()
    with FixtureApi() as fixture:
        got: list[dict[str, Any]] = []
        page, more = 1, True
        while more:
            answer = json.loads(http.request("GET", f"{fixture.url}/orders?batch=b-7&page={page}&pageSize=4").data)
            got += answer["data"]
            more, page = answer["paging"]["hasMore"], page + 1
        bad = http.request("GET", f"{fixture.url}/orders?batch=b-7&page=0&pageSize=4")
        assert bad.status == 400 and json.loads(bad.data)["error"]["code"] == "invalid_paging"
        assert fixture.pages["b-7"] == page - 1 == -(-len(got) // 4)
    assert got == orders_of("b-7") and 5 <= len(got) <= 10
    assert len({o["order_id"] for o in got}) == len(got)


def test_batches_differ_in_their_orders_and_each_batch_is_stable() -> None:
    counts = {len(orders_of(f"run-{n}")) for n in range(40)}
    assert counts == set(range(5, 11))
    assert orders_of("run-3") == orders_of("run-3")


def test_the_package_data_is_a_valid_playbook_and_valid_subscriptions_of_it() -> None:
    content = setup.playbook_content(run="r1", api_url="http://127.0.0.1:1")
    playbook = PlaybookDoc.model_validate(yaml.safe_load(content))
    assert playbook.metadata.catalog_path == setup.PLAYBOOK_PATH
    assert playbook.workload["api_url"] == "http://127.0.0.1:1" and playbook.workload["run"] == "r1"
    for item in setup.LISTENERS:
        doc = _subscription(item)
        assert doc.path == item.path and doc.listener() == item.listener
        assert doc.spec.ingress is not None and doc.spec.ingress.verify is not None
        assert doc.spec.ingress.verify.type == item.scheme and doc.spec.ingress.verify.secret == item.secret_alias
        assert doc.spec.spool.mode == "buffer_and_ack" and doc.spec.dispatch.playbook == setup.PLAYBOOK_PATH
    pull = SubscriptionDoc.model_validate(yaml.safe_load(setup.resource("pubsub.subscription.yaml")))
    assert (pull.path, pull.spec.mode, pull.spec.activation) == (setup.RUNTIME_SUBSCRIPTION, "pull", "continuous")
    assert pull.spec.subscription == setup.PUBSUB_SUBSCRIPTION


def test_a_published_demo_message_is_deduplicated_by_its_batch_not_by_the_emulators_message_id() -> None:
    # The emulator counts message ids from 1 again after a restart; the database remembers the ids
    # of earlier runs for the window, so keying on them made a second day's demo lose its messages.
    from noetl_cloud.runtime.message import prepare
    from noetl_cloud.runtime.port import SourceMessage

    pull = SubscriptionDoc.model_validate(yaml.safe_load(setup.resource("pubsub.subscription.yaml")))
    config = pull.spec.model_dump(mode="json")
    sent = [
        SourceMessage(
            message_id="11", data=b'{"batch": "%s"}' % run, header_pairs=(("x-idempotency-key", run.decode()),)
        )
        for run in (b"run-a-pubsub-0", b"run-b-pubsub-0")
    ]
    keys = [prepare(m, config, subscription_id="7", path=pull.path).request["dedup"]["key"] for m in sent]
    assert keys == ["run-a-pubsub-0", "run-b-pubsub-0"]


def test_the_playbook_names_its_database_by_keychain_alias_only() -> None:
    doc = yaml.safe_load(setup.playbook_content(run="r1", api_url="http://127.0.0.1:1"))
    assert doc["keychain"] == [{"name": setup.KEYCHAIN_ALIAS, "kind": "postgres"}]
    assert set(doc["workload"]) == {"run", "api_url", "page_size"}  # no DSN, no credential
    tasks = [task for step in doc["workflow"] for item in step.get("tool") or [] for task in item.values()]
    cursor = next(step["loop"]["cursor"] for step in doc["workflow"] if "loop" in step)
    postgres = [task for task in tasks if task["kind"] == "postgres"] + [cursor]
    assert len(postgres) == 3 and all(task["auth"] == setup.KEYCHAIN_ALIAS for task in postgres)
    assert not any(task["kind"] == "python" for task in tasks)
    assert "dsn" not in json.dumps(doc).lower() and "postgresql://" not in json.dumps(doc)


def test_secrets_are_made_once_and_kept_private(tmp_path: Any) -> None:
    first = setup.ensure_secrets(tmp_path / "wallet")
    assert setup.ensure_secrets(tmp_path / "wallet") == first
    assert set(first) == {item.secret_alias for item in setup.LISTENERS}
    assert first["demo_standard_secret"].startswith("whsec_")
    assert all(((tmp_path / "wallet" / alias).stat().st_mode & 0o777) == 0o600 for alias in first)


def _summary(**changes: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "run": "r1",
        "playbook": {"path": setup.PLAYBOOK_PATH, "version": 3},
        "channels": [
            {
                "channel": "webhook github",
                "subscription": "demo/webhooks/github",
                "sent": 2,
                "answers": {"202 accepted": 2},
                "executions": 2,
                "completed": 2,
                "failed": 0,
            },
            {
                "channel": "pubsub → runtime",
                "subscription": setup.RUNTIME_SUBSCRIPTION,
                "sent": 3,
                "answers": {"published": 3},
                "executions": 3,
                "completed": 3,
                "failed": 0,
            },
        ],
        "executions": {"total": 5, "completed": 5, "failed": 0, "ids": ["1", "2", "3", "4", "5"]},
        "rows": {"saved": 30, "expected": 30, "batches": 5, "batches_wrong": [], "fixture_pages": 10},
        "events": {"written": 200, "frames_committed": 9, "playbooks_completed": 5, "spool_and_circuit": {}},
        "spool": {"spooled": 2, "listed_during_outage": 2, "replayed": 2, "dead_lettered": 0, "left": 0},
        "replay": {"verified": 5, "ok": 5, "drift": {}},
        "elapsed_s": 12.5,
    }
    for key, value in changes.items():
        summary[key] = {**summary[key], **value} if isinstance(value, dict) else value
    return summary


def test_a_run_that_checked_out_has_no_problems_and_its_table_says_so() -> None:
    from noetl_cloud.demo.report import problems_of, table

    summary = _summary()
    assert problems_of(summary) == []
    rendered = table(summary)
    assert "replay parity  OK: 5 of 5" in rendered and "30 of 30 orders" in rendered
    (total,) = [line.split() for line in rendered.splitlines() if line.startswith("total")]
    assert total == ["total", "5", "5", "5", "0"]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {
                "channels": [
                    {
                        "channel": "webhook github",
                        "subscription": "s",
                        "sent": 2,
                        "answers": {},
                        "executions": 1,
                        "completed": 1,
                        "failed": 0,
                    }
                ]
            },
            "webhook github: 2 messages in, 1 executions",
        ),
        (
            {
                "channels": [
                    {
                        "channel": "pubsub",
                        "subscription": "s",
                        "sent": 2,
                        "answers": {},
                        "executions": 2,
                        "completed": 1,
                        "failed": 1,
                    }
                ]
            },
            "pubsub: 1 executions did not complete",
        ),
        ({"spool": {"replayed": 1}}, "spool: 2 spooled, 2 listed, 1 replayed"),
        ({"spool": {"left": 1}}, "spool: 1 items left"),
        ({"rows": {"saved": 29, "batches_wrong": ["r1-x-0"]}}, "rows: 29 saved, 30 expected"),
        ({"replay": {"ok": 4, "drift": {"5": ["frames"]}}}, "replay parity: 4 of 5 OK"),
    ],
)
def test_each_part_that_did_not_check_out_is_named(changes: dict[str, Any], named: str) -> None:
    from noetl_cloud.demo.report import problems_of

    problems = problems_of(_summary(**changes))
    assert len(problems) == 1 and problems[0].startswith(named)
