"""The migrations produce exactly the schema the code declares, and round-trip."""

from __future__ import annotations

import uuid

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

from noetl_cloud.db import migrate
from noetl_cloud.db.engine import create_db_engine
from noetl_cloud.db.schema import metadata
from noetl_cloud.eventlog.keys import key_digest
from noetl_cloud.settings import Settings


def _diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        opts = {"compare_type": True, "compare_server_default": True, "include_name": migrate.include_name}
        context = MigrationContext.configure(conn, opts=opts)
        return list(compare_metadata(context, metadata))


def _tables(engine: Engine) -> set[str]:
    """The tables, without the partitions of ``event`` and ``outbox``."""
    return {t for t in inspect(engine).get_table_names() if not migrate.PARTITION.match(t)}


def test_upgrade_from_empty_gives_exactly_the_declared_schema(empty_database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        assert _tables(engine) == set()
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision(engine)
        assert _tables(engine) == set(metadata.tables) | {"alembic_version"}
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_downgrade_to_base_and_upgrade_again_round_trips(empty_database_url: str) -> None:
    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        migrate.upgrade(engine)
        migrate.downgrade(engine, "base")
        assert _tables(engine) == {"alembic_version"}
        assert migrate.current_revision(engine) is None
        migrate.upgrade(engine)
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_a_schema_change_without_a_migration_is_detected(empty_database_url: str) -> None:
    """The drift check itself can fail: a column the code declares but no migration adds shows up."""
    from sqlalchemy import Column, Text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    try:
        migrate.upgrade(engine)
        extra = Column("undeclared_in_migrations", Text)
        metadata.tables["catalog"].append_column(extra)
        try:
            diff = _diff(engine)
        finally:
            metadata.tables["catalog"]._columns.remove(extra)
        assert any("undeclared_in_migrations" in repr(d) for d in diff)
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_0010_moves_the_rows_into_the_partitioned_tables_and_the_keys_into_event_key(empty_database_url: str) -> None:
    from sqlalchemy import text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    columns = (
        "event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_id, aggregate_type, "
        "event_type, schema_name, schema_version, event_time, ingest_time, producer, idempotency_key, envelope_checksum"
    )
    try:
        migrate.upgrade(engine, "0009")
        with engine.begin() as conn:
            for n, key in ((1, "k1"), (2, None)):
                conn.execute(
                    text(
                        f"INSERT INTO event ({columns}) VALUES (:id, 't', 'o', 7, 's', :n, 'a', 'x', 'e', 'e', 1, "
                        "now(), now(), 'p', :key, 'c')"
                    ),
                    {"id": n, "n": n, "key": key},
                )
            conn.execute(text("INSERT INTO outbox (event_id, topic, data) VALUES (1, 'noetl-events', '{}')"))
        migrate.upgrade(engine, "0011")  # 0012 digests the keys (the test below)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT count(*) FROM event_history")).scalar_one() == 2
            assert conn.execute(text("SELECT idempotency_key, event_id FROM event_key")).all() == [("k1", 1)]
            assert conn.execute(text("SELECT count(*) FROM outbox")).scalar_one() == 1  # in today's partition
            assert conn.execute(text("SELECT count(*) FROM outbox_default")).scalar_one() == 0
            positions = conn.execute(text("SELECT position FROM event ORDER BY position")).scalars().all()
            conn.execute(
                text(
                    f"INSERT INTO event ({columns}) VALUES (3, 't', 'o', 7, 's', 3, 'a', 'x', 'e', 'e', 1, "
                    "now(), now(), 'p', NULL, 'c')"
                )
            )
            after = conn.execute(text("SELECT position FROM event WHERE event_id = 3")).scalar_one()
        assert after > max(positions)  # the identity goes on after the copied rows
        migrate.downgrade(engine, "0009")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM event")).scalar_one() == 3
    finally:
        engine.dispose()


def test_0012_digests_the_keys_and_stores_checksums_as_bytes_and_back(empty_database_url: str) -> None:
    from sqlalchemy import text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    columns = (
        "event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_id, aggregate_type, "
        "event_type, schema_name, schema_version, event_time, ingest_time, producer, idempotency_key, "
        "envelope_checksum, correlation_id"
    )
    checksum = "0123456789abcdef" * 4
    producers = ["noetl://tenant/t/org/o/role/execute/node/1", "\x02p", "p"]
    try:
        migrate.upgrade(engine, "0011")
        with engine.begin() as conn:
            for n, key, digest, schema, aggregate, correlation in (
                (1, "t/o/7/k1", checksum, "noetl.step.done", "7", "7"),  # the defaults (the key: its execution's)
                (2, None, checksum, "custom.schema", "a", None),
                (3, "t/o/7/ключ", "not-hex", "noetl.step", "a", "c"),
            ):
                conn.execute(
                    text(
                        f"INSERT INTO event ({columns}) VALUES (:id, 't', 'o', 7, 's', :n, :a, 'x', 'step.done', "
                        ":schema, 1, now(), now(), :p, :key, :c, :corr)"
                    ),
                    {"id": n, "n": n, "key": key, "c": digest, "schema": schema, "a": aggregate, "corr": correlation}
                    | {"p": producers[n - 1]},
                )
                if key is not None:
                    conn.execute(text("INSERT INTO event_key VALUES (:k, :id)"), {"k": key, "id": n})
        migrate.upgrade(engine)
        with engine.begin() as conn:
            keys = conn.execute(text("SELECT key_digest, event_id FROM event_key ORDER BY event_id")).all()
            # the digests of today (0016 leads those of an execution with its id)
            assert [tuple(k) for k in keys] == [(key_digest("t/o/7/k1", 7), 1), (key_digest("t/o/7/ключ", 7), 3)]
            stored = conn.execute(text("SELECT envelope_checksum FROM event ORDER BY event_id")).scalars().all()
            assert [bytes(c) for c in stored] == [bytes.fromhex(checksum)] * 2 + [b"not-hex"]  # never fails
            compact = conn.execute(
                text(
                    "SELECT schema_name, aggregate_id, correlation_id, producer, idempotency_key FROM event "
                    "ORDER BY event_id"
                )
            ).all()
            assert [tuple(r) for r in compact] == [  # only the defaults are left out
                (None, None, None, "\x01role/execute/node/1", "\x01k1"),
                ("custom.schema", "a", "\x01", "\x02\x02p", None),  # no correlation, though it has an execution
                ("noetl.step", "a", "c", "p", "\x01ключ"),
            ]
        migrate.downgrade(engine, "0011")
        with engine.begin() as conn:
            keys = conn.execute(text("SELECT idempotency_key, event_id FROM event_key ORDER BY event_id")).all()
            assert [tuple(k) for k in keys] == [("t/o/7/k1", 1), ("t/o/7/ключ", 3)]  # the texts, from the events
            back = conn.execute(text("SELECT envelope_checksum FROM event ORDER BY event_id")).scalars().all()
            assert back[:2] == [checksum, checksum]
            whole = conn.execute(
                text(
                    "SELECT schema_name, aggregate_id, correlation_id, producer, idempotency_key FROM event "
                    "ORDER BY event_id"
                )
            ).all()
            assert [tuple(r) for r in whole] == [
                ("noetl.step.done", "7", "7", producers[0], "t/o/7/k1"),
                ("custom.schema", "a", None, producers[1], None),
                ("noetl.step", "a", "c", "p", "t/o/7/ключ"),
            ]
    finally:
        engine.dispose()


def test_0016_leads_each_key_of_an_execution_with_its_id_and_back(empty_database_url: str) -> None:
    import hashlib

    from sqlalchemy import text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    columns = (
        "event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_type, "
        "event_type, schema_version, event_time, ingest_time, producer, idempotency_key, envelope_checksum"
    )

    def sha(key: str) -> bytes:
        return hashlib.sha256(key.encode()).digest()

    # (event, execution, key as stored, key's text): relative to its execution, literal, of no execution
    events = ((1, 7, "\x01k1", "t/o/7/k1"), (2, None, "catalog/a/1", "catalog/a/1"), (3, 9, "x/k1", "x/k1"))
    try:
        migrate.upgrade(engine, "0015")
        with engine.begin() as conn:
            for n, execution, stored, key in events:
                conn.execute(
                    text(
                        f"INSERT INTO event ({columns}) VALUES (:id, 't', 'o', :x, 's', :id, 'x', 'step.done', 1, "
                        "now(), now(), 'p', :key, '\\x00')"
                    ),
                    {"id": n, "x": execution, "key": stored},
                )
                conn.execute(
                    text("INSERT INTO event_key VALUES (:d, :id)"), {"d": uuid.UUID(bytes=sha(key)[:16]), "id": n}
                )
        migrate.upgrade(engine, "0016")
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT key_digest, event_id FROM event_key ORDER BY event_id")).all()
            assert (
                [(r[0].bytes, r[1]) for r in rows]
                == [
                    ((7).to_bytes(8, "big") + sha("t/o/7/k1")[:8], 1),
                    (sha("catalog/a/1")[:16], 2),  # no execution: as it was
                    ((9).to_bytes(8, "big") + sha("x/k1")[:8], 3),
                ]
            )
            assert [r[0] for r in rows] == [key_digest(key, x) for _n, x, _s, key in events]  # as the appends do
        migrate.downgrade(engine, "0015")
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT key_digest, event_id FROM event_key ORDER BY event_id")).all()
            assert [(r[0].bytes, r[1]) for r in rows] == [(sha(key)[:16], n) for n, _x, _s, key in events]
    finally:
        engine.dispose()


def test_0017_stores_projection_digests_as_their_bytes_and_back(empty_database_url: str) -> None:
    from sqlalchemy import text

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    checksum, digest = "ab" * 32, "cd" * 32
    try:
        migrate.upgrade(engine, "0016")
        with engine.begin() as conn:
            for page, value in ((0, ""), (1, checksum), (2, "not hex")):  # empty on all but the last page
                conn.execute(
                    text(
                        "INSERT INTO projection (tenant_id, organization_id, execution_id, projection_type, page, "
                        "version, state, checksum, upcaster_registry_digest, reducer_version) "
                        "VALUES ('t', 'o', 7, 'commands', :page, 1, '[]', :c, :d, 1)"
                    ),
                    {"page": page, "c": value, "d": digest},
                )
            conn.execute(
                text(
                    "INSERT INTO projection_tracking (tenant_id, organization_id, execution_id, version, position, "
                    "upcaster_registry_digest, reducer_version) VALUES ('t', 'o', 7, 1, 1, :d, 1)"
                ),
                {"d": digest},
            )
        migrate.upgrade(engine, "0017")
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT checksum, upcaster_registry_digest FROM projection ORDER BY page")).all()
            tracked = conn.execute(text("SELECT upcaster_registry_digest FROM projection_tracking")).scalar_one()
        assert [(bytes(c), bytes(d)) for c, d in rows] == [
            (b"", bytes.fromhex(digest)),
            (bytes.fromhex(checksum), bytes.fromhex(digest)),
            (b"not hex", bytes.fromhex(digest)),  # not hex digits: its bytes, the upgrade does not fail
        ]
        assert bytes(tracked) == bytes.fromhex(digest)
        migrate.downgrade(engine, "0016")
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT checksum, upcaster_registry_digest FROM projection ORDER BY page")).all()
            tracked = conn.execute(text("SELECT upcaster_registry_digest FROM projection_tracking")).scalar_one()
        assert [tuple(r) for r in rows] == [("", digest), (checksum, digest), (b"not hex".hex(), digest)]
        assert tracked == digest
    finally:
        engine.dispose()


def test_0018_stores_stream_and_causation_ids_as_the_readers_rebuild_them_and_back(empty_database_url: str) -> None:
    from sqlalchemy import text

    from noetl_cloud.eventlog.stored import stored_causation, stored_stream

    engine = create_db_engine(Settings(database_url=empty_database_url), pool_size=1)
    columns = (
        "event_id, tenant_id, organization_id, execution_id, stream_id, stream_version, aggregate_type, event_type, "
        "schema_version, event_time, ingest_time, producer, envelope_checksum, causation_id"
    )
    rows = [  # (event id, execution id, stream id, causation id), whole
        (1000, 7, "execution/7", "999"),  # the execution's own stream, caused by the event before
        (1001, 7, "execution/7/stage/3/frame/4", "1001"),  # a frame's stream; caused by itself: a difference of 0
        (1002, 7, "execution/70", "0999"),  # another execution's name; a cause that is not a canonical id
        (1003, None, "catalog/x", "2000"),  # no execution; a cause after the event: kept whole
        (1004, 7, "\x01odd", "\x02c"),  # values that start with the markers
        (1005, None, "execution/7", None),
        (1006, 7, "execution/7", "not-an-id"),
    ]
    try:
        migrate.upgrade(engine, "0017")
        with engine.begin() as conn:
            for event_id, execution_id, stream_id, causation_id in rows:
                conn.execute(
                    text(
                        f"INSERT INTO event ({columns}) VALUES (:id, 't', 'o', :x, :s, 1, 'x', 'step.done', 1, now(), "
                        "now(), 'p', '\\x00', :c)"
                    ),
                    {"id": event_id, "x": execution_id, "s": stream_id, "c": causation_id},
                )
        migrate.upgrade(engine, "0018")
        read = text("SELECT stream_id, causation_id FROM event ORDER BY event_id")
        with engine.begin() as conn:
            stored = [tuple(r) for r in conn.execute(read)]
        # the SQL of the migration writes what the event store writes (noetl_cloud.eventlog.stored)
        assert stored == [(stored_stream(s, x), stored_causation(c, e)) for e, x, s, c in rows]
        assert stored[:4] == [
            ("\x01", "\x011"),
            ("\x01/stage/3/frame/4", "\x010"),
            ("execution/70", "0999"),
            ("catalog/x", "2000"),
        ]
        assert stored[4] == ("\x02\x01odd", "\x02\x02c")
        migrate.downgrade(engine, "0017")
        with engine.begin() as conn:
            assert [tuple(r) for r in conn.execute(read)] == [(s, c) for _e, _x, s, c in rows]
    finally:
        engine.dispose()
