"""The DSL shape of cursor loops (``loop.spec.mode: cursor``, ``loop.spec.frame``) and the frame policy."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_cloud.engine.model import compile_playbook
from noetl_cloud.errors import ValidationFailed
from noetl_cloud.frames.models import CommitRequest
from noetl_cloud.frames.policy import FramePolicy
from noetl_cloud.spec import PlaybookDoc, validate_document


def _plan(loop: dict[str, Any]) -> Any:
    doc = validate_document(
        {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": "c", "path": "t/c"},
            "workflow": [{"step": "s", "loop": loop, "tool": {"kind": "noop"}}],
        }
    )
    assert isinstance(doc, PlaybookDoc)
    return compile_playbook(doc)["s"]


CURSOR = {"kind": "postgres", "auth": "pg", "claim": "SELECT 1 LIMIT {{ __frame_max_rows }}"}


def test_a_cursor_loop_needs_no_collection_and_defaults_to_one_row_frames_run_per_row() -> None:
    loop = _plan({"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor"}}).loop
    assert loop.mode == "cursor" and loop.items is None and loop.max_in_flight == 1
    assert loop.frame == FramePolicy() and (loop.frame.max_rows, loop.frame.process) == (1, "row")
    assert loop.cursor["claim"].startswith("SELECT 1")


def test_the_frame_policy_is_read_from_loop_spec_frame() -> None:
    frame = {"max_rows": 50, "process": "frame", "lease_seconds": 60, "heartbeat_seconds": 15, "max_attempts": 2}
    loop = _plan(
        {"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor", "max_in_flight": 4, "frame": frame}}
    ).loop
    assert loop.max_in_flight == 4 and loop.frame.max_rows == 50 and loop.frame.process == "frame"
    assert loop.frame.heartbeat_interval() == 15 and loop.frame.heartbeat_interval(30) == 10


@pytest.mark.parametrize(
    ("loop", "field"),
    [
        ({"iterator": "p", "spec": {"mode": "cursor"}}, "s.loop.cursor.kind"),
        ({"iterator": "p", "cursor": {"kind": "http"}, "spec": {"mode": "cursor"}}, "s.loop.cursor.kind"),
        ({"iterator": "p", "cursor": {"kind": "postgres"}, "spec": {"mode": "cursor"}}, "s.loop.cursor.claim"),
        ({"cursor": CURSOR, "spec": {"mode": "cursor"}}, "s.loop"),
        (
            {"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor", "frame": {"process": "x"}}},
            "s.loop.spec.frame.process",
        ),
        (
            {"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor", "frame": {"max_rows": 0}}},
            "s.loop.spec.frame.max_rows",
        ),
        (
            {"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor", "frame": {"retry_mode": "split"}}},
            "s.loop.spec.frame.retry_mode",
        ),
        (
            {
                "iterator": "p",
                "cursor": CURSOR,
                "spec": {"mode": "cursor", "frame": {"lease_seconds": 5, "heartbeat_seconds": 5}},
            },
            "s.loop.spec.frame",
        ),
        (
            {"iterator": "p", "cursor": CURSOR, "spec": {"mode": "cursor", "max_in_flight": 0}},
            "s.loop.spec.max_in_flight",
        ),
    ],
)
def test_a_malformed_cursor_loop_is_refused_naming_the_field(loop: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        _plan(loop)
    assert caught.value.details[0]["field"] == field


def test_an_ipc_hint_needs_a_durable_reference_beside_it_or_nested() -> None:
    def commit(output_ref: Any) -> CommitRequest:
        return CommitRequest(worker_id="w", status="COMPLETED", output_ref=output_ref)

    commit({"rows_ref": {"uri": "noetl://x", "ipc": {"shm_name": "/a"}}}).check_durable()
    commit({"ipc": {"shm_name": "/a"}, "rows_ref": {"ref": "noetl://x"}}).check_durable()
    commit(None).check_durable()
    for bad in ({"ipc": {"shm_name": "/a"}}, {"rows_ref": {"ipc": {"shm_name": "/a"}, "sha256": "x"}}):
        with pytest.raises(ValidationFailed) as caught:
            commit(bad).check_durable()
        assert caught.value.code == "ipc_without_durable_ref"
