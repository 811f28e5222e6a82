"""The payload store contract on the in-memory adapter, and the Arrow IPC serialization of row windows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from noetl_cloud.payload import ObjectPayloadStore, ipc_to_rows, rows_to_ipc
from noetl_cloud.payload.memory import MemoryPayloadStore
from tests.contracts.payload import ORG, TENANT, PayloadStoreContract


class TestMemoryPayloadStore(PayloadStoreContract):
    @pytest.fixture
    def store(self) -> MemoryPayloadStore:
        return MemoryPayloadStore(tenant_id=TENANT, organization_id=ORG)

    def version(self, store: ObjectPayloadStore, key: str) -> str | None:
        assert isinstance(store, MemoryPayloadStore)
        found = store.objects.get(key)
        return None if found is None else str(id(found))

    def damage(self, store: ObjectPayloadStore, key: str, data: bytes) -> None:
        assert isinstance(store, MemoryPayloadStore)
        _old, media_type, meta = store.objects[key]
        store.objects[key] = (data, media_type, meta)


def test_a_uniform_window_is_columnar_and_its_schema_digest_ignores_values() -> None:
    a = rows_to_ipc([{"id": 1, "name": "x"}, {"id": 2, "name": "y"}])
    b = rows_to_ipc([{"id": 7, "name": "z"}])
    assert a.encoding == "columns" and a.row_count == 2
    assert a.schema_digest == b.schema_digest and a.data != b.data
    table = pa.ipc.open_stream(a.data).read_all()
    assert table.column_names == ["id", "name"] and table.schema.field("id").type == pa.int64()


def test_rows_the_columnar_form_cannot_carry_exactly_fall_back_to_json_rows_and_still_round_trip() -> None:
    ragged = [{"id": 1, "v": "text"}, {"id": "two", "w": {"nested": [1, {"x": None}]}}]
    window = rows_to_ipc(ragged)
    assert window.encoding == "json-rows"
    assert ipc_to_rows(window.data) == ragged


def test_an_empty_window_and_a_non_object_row_are_handled() -> None:
    assert ipc_to_rows(rows_to_ipc([]).data) == []
    with pytest.raises(TypeError):
        rows_to_ipc([1, 2])  # type: ignore[list-item]
