from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select, text

from noetl_cloud.db.schema import event, outbox
from noetl_cloud.eventlog import DuplicateEventId, DuplicateIdempotencyKey
from noetl_cloud.eventlog.keys import KEY_DIGEST_SQL, key_digest
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.stored import KEY_TEXT_SQL
from tests.contracts.eventlog import EventStoreContract, make_event, new_stream


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, db_engine: Engine) -> PostgresEventStore:
        return PostgresEventStore(db_engine)

    @pytest.fixture
    def concurrent_store(self, db_engine: Engine) -> PostgresEventStore:
        return PostgresEventStore(db_engine)


def _outbox_event_ids(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(outbox.c.event_id).order_by(outbox.c.outbox_id)).scalars())


def test_every_committed_append_has_one_outbox_row_per_execution_naming_its_last_event(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine, events_topic="noetl-events")
    stream = new_stream()
    sealed = store.append(stream, [make_event(stream) for _ in range(3)])
    sealed += store.append(stream, [make_event(stream)])
    with db_engine.connect() as conn:
        rows = conn.execute(select(outbox).order_by(outbox.c.outbox_id)).mappings().all()
    assert [r["event_id"] for r in rows] == [int(sealed[2].event_id), int(sealed[3].event_id)]
    assert [r["data"]["events"] for r in rows] == [3, 1]
    assert {r["topic"] for r in rows} == {"noetl-events"}
    assert all(r["status"] == "pending" and r["ordering_key"] == sealed[0].execution_id for r in rows)
    assert rows[0]["attributes"] == {"event_type": "step.done", "tenant_id": "t1", "organization_id": "o1"}


def test_rolled_back_transaction_leaves_no_event_no_outbox_row_no_stream_bump(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()

    class Crash(Exception):
        pass

    with pytest.raises(Crash), db_engine.begin() as conn:
        store.append_in(conn, stream, [make_event(stream), make_event(stream)])
        assert conn.execute(select(func.count()).select_from(event)).scalar_one() == 2
        raise Crash  # a crash between the inserts and the commit
    assert _outbox_event_ids(db_engine) == []
    with db_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(event)).scalar_one() == 0
    assert store.stream_version(stream) == 0


def test_append_in_shares_the_callers_transaction(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    with db_engine.begin() as conn:
        conn.execute(text("CREATE TABLE side_effect (id int)"))
        conn.execute(text("INSERT INTO side_effect VALUES (1)"))
        store.append_in(conn, stream, [make_event(stream)])
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM side_effect")).scalar_one() == 1
    assert len(store.read_stream(stream)) == 1 and len(_outbox_event_ids(db_engine)) == 1


def test_duplicate_key_inside_a_callers_transaction_raises_and_the_caller_rolls_back(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    store.append(stream, [make_event(stream, idempotency_key="once")])
    with pytest.raises(DuplicateIdempotencyKey), db_engine.begin() as conn:
        store.append_in(conn, stream, [make_event(stream), make_event(stream, idempotency_key="once")])
    assert store.stream_version(stream) == 1
    assert len(_outbox_event_ids(db_engine)) == 1


def test_reused_event_id_is_a_typed_error(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    first = make_event(stream)
    store.append(stream, [first])
    with pytest.raises(DuplicateEventId):
        store.append(stream, [first.model_copy(update={"idempotency_key": None})])
    assert store.stream_version(stream) == 1


def test_stored_envelope_round_trips_byte_for_byte(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    sealed = store.append(
        stream,
        [
            make_event(
                stream,
                payload={"ünï": "cödé", "n": [1, 2.5, None, True]},
                meta={"pool": "shared"},
                idempotency_key=f"{stream}/x",
            )
        ],
    )
    (read,) = store.read_stream(stream)
    assert read.to_json() == sealed[0].to_json()
    assert read.verify_checksum()


def test_keys_are_stored_as_digests_that_sql_computes_the_same_way(db_engine: Engine) -> None:
    """``event_key`` holds 16-byte digests; the SQL expression retention and the seeding use agrees with
    the appends' Python digest (a mismatch would leave keys behind when their partition is dropped)."""
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    execution = stream.split("/")[1]
    keys = [f"{stream}/ключ/{'x' * 300}/1", f"{stream}/ключ/{'x' * 300}/2"]  # differ only at the end
    keys.append(f"t1/o1/{execution}/command/1/issued")  # stored relative to its execution (eventlog.stored)
    sealed = store.append(stream, [make_event(stream, idempotency_key=k) for k in keys])
    key_text = KEY_TEXT_SQL.format(k="e.idempotency_key", t="e.tenant_id", o="e.organization_id", x="e.execution_id")
    with db_engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT k.key_digest, k.key_digest = {KEY_DIGEST_SQL.format(k=key_text, x='e.execution_id')} AS same, "
                f"pg_column_size(k.key_digest) AS size, {key_text} AS key, e.idempotency_key AS stored "
                "FROM event_key k JOIN event e ON e.event_id = k.event_id WHERE e.execution_id = :x ORDER BY e.position"
            ),
            {"x": int(execution)},
        ).all()
        checksum = conn.execute(
            text("SELECT envelope_checksum FROM event WHERE event_id = :e"), {"e": int(sealed[0].event_id)}
        ).scalar_one()
    assert [r.key_digest for r in rows] == [key_digest(k, execution) for k in keys]
    assert all(r.same for r in rows) and {r.size for r in rows} == {16}
    assert [r.key for r in rows] == keys and rows[2].stored == "\x01command/1/issued"
    assert [e.idempotency_key for e in store.read_stream(stream)] == keys
    assert bytes(checksum) == bytes.fromhex(sealed[0].envelope_checksum or "")  # 32 bytes, not 64 hex digits


def test_a_key_reused_with_another_event_is_refused_by_its_digest(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    long_key = f"{stream}/" + "k" * 480
    store.append(stream, [make_event(stream, idempotency_key=long_key)])
    with pytest.raises(DuplicateIdempotencyKey) as raised:
        store.append(stream, [make_event(stream, idempotency_key=long_key)])  # another event, the same key
    assert raised.value.keys == [long_key]  # named by its text, though only its digest is stored
    store.append(stream, [make_event(stream, idempotency_key=long_key[:-1] + "j")])  # one character differs
    assert store.stream_version(stream) == 2
    with db_engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM event_key WHERE key_digest = :d"),
                {"d": key_digest(long_key, stream.split("/")[1])},
            ).scalar_one()
            == 1
        )


def test_fields_that_repeat_the_execution_are_not_stored_and_read_back_whole(db_engine: Engine) -> None:
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    execution = stream.split("/")[1]
    usual = make_event(stream).model_copy(update={"aggregate_id": execution})  # correlation: the execution id
    own = make_event(stream).model_copy(update={"schema_name": "acme.step.done", "correlation_id": None})
    sealed = store.append(stream, [usual, own])
    with db_engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT schema_name, aggregate_id, correlation_id, producer FROM event WHERE execution_id = :x "
                "ORDER BY stream_version"
            ),
            {"x": int(execution)},
        ).all()
    assert [tuple(r) for r in stored] == [
        (None, None, None, "noetl://test"),  # the contract factory's producer is not under its tenant's prefix
        ("acme.step.done", stream, "\x01", "noetl://test"),
    ]
    read = store.read_stream(stream)
    assert [(e.schema_name, e.aggregate_id, e.correlation_id) for e in read] == [
        ("noetl.step.done", execution, execution),
        ("acme.step.done", stream, None),
    ]
    assert [e.to_json() for e in read] == [e.to_json() for e in sealed] and all(e.verify_checksum() for e in read)


def test_stream_and_causation_ids_are_stored_relative_and_streams_read_back_whole(db_engine: Engine) -> None:
    """An execution's stream id is stored after ``execution/<id>``, a cause as its distance back
    (noetl_cloud.eventlog.stored); a stream named like an execution's but of events of none keeps its
    id whole. ``read_stream`` finds each, and every envelope reads back as sealed."""
    store = PostgresEventStore(db_engine)
    stream = new_stream()
    frame = f"{stream}/stage/1/frame/2"
    first = store.append(stream, [make_event(stream)])[0]
    caused = store.append(stream, [make_event(stream, causation_id=first.event_id)])
    framed = store.append(frame, [make_event(frame, causation_id="external-1")])
    orphan = new_stream()  # named like an execution's stream, its events of no execution
    loose = store.append(orphan, [make_event(orphan, execution_id=None)])
    with db_engine.connect() as conn:
        stored = conn.execute(
            text("SELECT event_id, stream_id, causation_id FROM event WHERE event_id = ANY(:ids) ORDER BY position"),
            {"ids": [int(e.event_id) for e in (first, *caused, *framed, *loose)]},
        ).all()
    assert [(r.stream_id, r.causation_id) for r in stored] == [
        ("\x01", None),
        ("\x01", "\x01" + str(int(caused[0].event_id) - int(first.event_id))),
        ("\x01/stage/1/frame/2", "external-1"),
        (orphan, None),
    ]
    for name, sealed in ((stream, [first, *caused]), (frame, framed), (orphan, loose)):
        read = store.read_stream(name)
        assert [e.to_json() for e in read] == [e.to_json() for e in sealed] and all(e.verify_checksum() for e in read)
