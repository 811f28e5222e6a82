"""A result stored by reference (data-plane §4, DSL v2 §10.1) leaves its large values out of the event: the
``context`` of a mapping result keeps only its short scalars."""

from __future__ import annotations

from noetl_cloud.engine.payloads import CONTEXT_MAX_KEYS, CONTEXT_MAX_STRING, MemoryPayloadStore, compact
from noetl_cloud.envelope import canonical_json

from .conftest import Harness

BIG = "x" * 600_000


def test_a_large_string_of_a_mapping_result_stays_out_of_the_events(harness: Harness) -> None:
    value = {"body": BIG, "status_code": 200, "ok": True, "etag": "abc", "missing": None, "nested": {"a": 1}}
    result = harness.run({"step": "start", "tool": {"kind": "echo", "value": value}})
    assert result.status == "completed" and result.results["start"]["body"] == BIG  # templates see it
    for event_type in ("task.done", "step.done"):
        (payload,) = harness.payloads_of(event_type)
        assert "result" not in payload and harness.payloads.resolve(payload["reference"])["body"] == BIG
        assert payload["context"] == {"status_code": 200, "ok": True, "etag": "abc", "missing": None}
        assert len(canonical_json(payload).encode()) < 4096


def test_context_keeps_strings_up_to_the_limit_and_at_most_the_key_limit() -> None:
    value = {f"k{i:03}": i for i in range(100)}
    value.update({"edge": "y" * CONTEXT_MAX_STRING, "over": "y" * (CONTEXT_MAX_STRING + 1), "big": BIG})
    body = compact("ok", value, store=MemoryPayloadStore(), execution_id="1", name="s", threshold=1024)
    assert len(body["context"]) == CONTEXT_MAX_KEYS
    assert list(body["context"]) == [f"k{i:03}" for i in range(CONTEXT_MAX_KEYS)]
    small = {"edge": "y" * CONTEXT_MAX_STRING, "over": "y" * (CONTEXT_MAX_STRING + 1), "big": BIG, "é": "é" * 200}
    body = compact("ok", small, store=MemoryPayloadStore(), execution_id="1", name="s", threshold=1024)
    assert body["context"] == {"edge": "y" * CONTEXT_MAX_STRING}  # "é" * 200 is 400 bytes


def test_a_small_result_is_inline_and_has_no_context() -> None:
    body = compact("ok", {"a": "b"}, store=MemoryPayloadStore(), execution_id="1", name="s", threshold=1024)
    assert body == {"status": "ok", "result": {"a": "b"}}
