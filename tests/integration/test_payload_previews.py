"""Payload previews against PostgreSQL and a real payload store (a folder): an execution's references only,
Arrow frames as bounded tables (pyarrow), text's first bytes, and the bounds as JSON errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.control.payload_previews import MAX_CELL, PayloadPreviews, PayloadStoreNotConfigured
from noetl_cloud.envelope import PayloadRef
from noetl_cloud.payload import store_rows
from noetl_cloud.payload.filesystem import FilesystemPayloadStore
from noetl_cloud.settings import Settings
from tests.integration.control_fixtures import make_settings, playbook, register


@pytest.fixture
def control_settings(database_url: str, local_env: dict[str, str], topic_prefix: str, tmp_path: Path) -> Settings:
    return make_settings(
        database_url, local_env, topic_prefix, payload_backend="filesystem", payload_dir=str(tmp_path / "payloads")
    )


@pytest.fixture
def store(control_settings: Settings) -> FilesystemPayloadStore:
    return FilesystemPayloadStore(str(control_settings.payload_dir), tenant_id="default", organization_id="default")


def execution_with(client: FlaskClient, plane: ControlPlane, events: list[dict[str, Any]]) -> str:
    register(client, playbook("demo/alpha"))
    eid = str(client.post("/api/execute", json={"path": "demo/alpha"}).get_json()["execution_id"])
    envelopes = [
        plane.events.new(
            "frame.committed",
            stream_id=f"execution/{eid}/test",
            aggregate_type="frame",
            aggregate_id=str(i),
            execution_id=eid,
            payload=e.get("payload"),
            payload_ref=e.get("payload_ref"),
        )
        for i, e in enumerate(events)
    ]
    plane.store.append(f"execution/{eid}/test", envelopes)
    return eid


def test_an_arrow_frame_is_a_bounded_table_and_text_its_first_bytes(
    client: FlaskClient, plane: ControlPlane, store: FilesystemPayloadStore
) -> None:
    rows = [{"id": i, "name": f"n{i}", "note": "x" * (MAX_CELL + 50) if i == 0 else None} for i in range(30)]
    ragged = [{"a": 1}, {"b": [1, 2]}]  # written as JSON rows
    frame, mixed = store_rows(store, rows), store_rows(store, ragged)
    note = store.store(json.dumps({"k": "v" * 10_000}).encode(), "application/json", {})
    blob = store.store(bytes(range(256)), "application/octet-stream", {})
    eid = execution_with(
        client,
        plane,
        [
            {"payload": {"output_ref": {"rows_ref": frame}}},
            {"payload": {"nested": [{"reference": mixed}]}},
            {"payload_ref": PayloadRef(uri=note.uri, sha256=note.sha256, media_type=note.media_type)},
            {"payload_ref": PayloadRef(**blob.model_dump())},
        ],
    )

    table = client.get(f"/api/executions/{eid}/payloads/{frame['sha256']}?rows=5")
    assert table.status_code == 200, table.get_json()
    body = table.get_json()
    assert body["kind"] == "table" and body["columns"] == ["id", "name", "note"] and body["verified"] is True
    assert [r[:2] for r in body["rows"]] == [[str(i), f"n{i}"] for i in range(5)]
    assert len(body["rows"][0][2]) == MAX_CELL and body["rows"][0][2].endswith("…") and body["rows"][1][2] == "null"
    assert len(client.get(f"/api/executions/{eid}/payloads/{frame['sha256']}").get_json()["rows"]) == 20

    json_rows = client.get(f"/api/executions/{eid}/payloads/{mixed['sha256']}").get_json()
    assert json_rows["columns"] == ["a", "b"] and json_rows["rows"] == [["1", "null"], ["null", "[1, 2]"]]

    head = client.get(f"/api/executions/{eid}/payloads/{note.sha256}?bytes=100").get_json()
    assert head["kind"] == "text" and head["text"] == '{"k": "' + "v" * 93 and head["truncated"] is True
    assert head["verified"] is False and head["size_bytes"] is None  # the event's reference has no size
    whole = client.get(f"/api/executions/{eid}/payloads/{note.sha256}?bytes=65536").get_json()
    assert whole["truncated"] is False and whole["verified"] is True and len(whole["text"]) == note.size_bytes
    assert whole["size_bytes"] == note.size_bytes  # read whole: its size is known

    binary = client.get(f"/api/executions/{eid}/payloads/{blob.sha256}").get_json()
    assert binary["kind"] == "binary" and binary["head_hex"] == bytes(range(64)).hex()


def test_only_what_the_execution_refers_to_is_previewed_and_bad_input_is_a_json_error(
    client: FlaskClient, plane: ControlPlane, store: FilesystemPayloadStore
) -> None:
    referenced = store_rows(store, [{"a": 1}])
    other = store_rows(store, [{"secret": 1}])  # stored, but no event of this execution refers to it
    eid = execution_with(client, plane, [{"payload": {"output_ref": {"rows_ref": referenced}}}])
    cases = [
        (f"/api/executions/{eid}/payloads/{other['sha256']}", 404, "payload_not_referenced"),
        (f"/api/executions/12345/payloads/{referenced['sha256']}", 404, "execution_not_found"),
        (f"/api/executions/{eid}/payloads/NOTHEX", 400, "invalid_digest"),
        (f"/api/executions/{eid}/payloads/{referenced['sha256']}?rows=0", 400, "invalid_preview_bound"),
        (f"/api/executions/{eid}/payloads/{referenced['sha256']}?rows=201", 400, "invalid_preview_bound"),
        (f"/api/executions/{eid}/payloads/{referenced['sha256']}?bytes=x", 400, "invalid_preview_bound"),
    ]
    for url, status, code in cases:
        answer = client.get(url)
        assert (answer.status_code, answer.get_json()["error"]["code"]) == (status, code), url


def test_a_payload_gone_from_the_store_is_not_found_and_no_store_is_unavailable(
    client: FlaskClient, plane: ControlPlane, store: FilesystemPayloadStore
) -> None:
    ref = store_rows(store, [{"a": 1}])
    eid = execution_with(client, plane, [{"payload": {"output_ref": {"rows_ref": ref}}}])
    (Path(str(plane.settings.payload_dir)) / ref["uri"].removeprefix("noetl://")).unlink()
    gone = client.get(f"/api/executions/{eid}/payloads/{ref['sha256']}")
    assert gone.status_code == 404 and gone.get_json()["error"]["code"] == "payload_not_found"
    without = PayloadPreviews(plane.engine, ("default", "default"), None)
    with pytest.raises(PayloadStoreNotConfigured) as refused:
        without.preview(int(eid), ref["sha256"], rows=1, max_bytes=1)
    assert refused.value.status == 503
