"""``kind: postgres`` against the local stack's PostgreSQL: binds, rows, SQLSTATEs, pools and policy retries."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from noetl_cloud.engine import Engine, FakeClock, MemoryPayloadStore, MemorySink, Outcome, ToolCall
from noetl_cloud.spec import PlaybookDoc, validate_document
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.postgres import PostgresTool
from noetl_cloud.tools.registry import ToolRegistry


@pytest.fixture
def tool() -> Iterator[PostgresTool]:
    tool = PostgresTool(pool_size=2)
    yield tool
    tool.close()


@pytest.fixture
def keychain(database_url: str) -> dict[str, Any]:
    return {"pg_local": {"name": "pg_local", "kind": "postgres", "dsn": database_url}}


def run(tool: PostgresTool, keychain: dict[str, Any], spec: dict[str, Any] | None = None, **config: Any) -> Outcome:
    call = ToolCall(
        kind="postgres",
        config={"auth": "pg_local", **config},
        spec=spec or {},
        execution_id="1",
        step="s",
        task="t",
        attempt=1,
        keychain=keychain,
    )
    return tool.run(call)


def test_command_then_query_returns_rows_columns_and_row_count(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    created = run(tool, keychain, command="CREATE TABLE t (id int PRIMARY KEY, name text, at timestamptz)")
    assert created.status == "ok" and created.result == {"rows": [], "row_count": 0, "columns": []}
    assert created.to_dict()["pg"] == {"code": "00000", "sqlstate": "00000"}
    for i in range(3):
        inserted = run(
            tool, keychain, command="INSERT INTO t VALUES (:id, :name, now())", params={"id": i, "name": f"n{i}"}
        )
        assert inserted.status == "ok" and inserted.result["row_count"] == 1
    updated = run(tool, keychain, command="UPDATE t SET name = upper(name) WHERE id >= :low", params={"low": 1})
    assert updated.result["row_count"] == 2
    selected = run(tool, keychain, query="SELECT id, name, at FROM t WHERE id < :high ORDER BY id", params={"high": 9})
    assert selected.status == "ok"
    assert selected.result["columns"] == ["id", "name", "at"] and selected.result["row_count"] == 3
    assert [(r["id"], r["name"]) for r in selected.result["rows"]] == [(0, "n0"), (1, "N1"), (2, "N2")]
    assert isinstance(selected.result["rows"][0]["at"], str)


def test_values_are_bound_never_interpolated(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    run(tool, keychain, command="CREATE TABLE t (v text)")
    hostile = "x'); DROP TABLE t; --"
    assert run(tool, keychain, command="INSERT INTO t VALUES (:v)", params={"v": hostile}).status == "ok"
    assert run(tool, keychain, query="SELECT v FROM t").result["rows"] == [{"v": hostile}]


def test_a_template_in_the_sql_is_sent_as_written(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    outcome = run(tool, keychain, query="SELECT '{{ workload.x }}' AS s")
    assert outcome.result["rows"] == [{"s": "{{ workload.x }}"}]


def test_list_and_mapping_params_bind_as_json(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    run(tool, keychain, command="CREATE TABLE items (id text PRIMARY KEY, body jsonb)")
    items = [{"id": "a", "n": 1}, {"id": "b", "n": 2}]
    inserted = run(
        tool,
        keychain,
        command="INSERT INTO items SELECT i->>'id', i FROM jsonb_array_elements(CAST(:items AS jsonb)) AS i",
        params={"items": items},
    )
    assert inserted.result["row_count"] == 2
    rows = run(tool, keychain, query="SELECT body FROM items ORDER BY id").result["rows"]
    assert [r["body"] for r in rows] == items
    echoed = run(tool, keychain, query="SELECT CAST(:m AS jsonb) AS m", params={"m": {"k": [1, None]}})
    assert echoed.result["rows"] == [{"m": {"k": [1, None]}}]


def test_credential_from_host_fields_shares_the_pool_of_the_same_dsn(
    tool: PostgresTool, keychain: dict[str, Any], database_url: str
) -> None:
    url = make_url(database_url)
    fields = {
        "kind": "postgres_credential",
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "database": url.database,
    }
    both = {**keychain, "pg_fields": fields}
    assert run(tool, both, query="SELECT 1 AS one").result["rows"] == [{"one": 1}]
    outcome = tool.run(
        ToolCall("postgres", {"auth": "pg_fields", "query": "SELECT 2 AS two"}, {}, "1", "s", "t", 1, both)
    )
    assert outcome.result["rows"] == [{"two": 2}]
    assert tool.pools() == 1


def test_pool_connections_have_tcp_nodelay(tool: PostgresTool, keychain: dict[str, Any], database_url: str) -> None:
    run(tool, keychain, query="SELECT 1")
    (engine,) = tool._engines.values()
    raw = engine.raw_connection()
    try:
        sock = raw.driver_connection._usock  # type: ignore[union-attr]
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("sql", "sqlstate", "kind"),
    [
        ("SELECT * FROM no_such_table", "42P01", "syntax_error_or_access_rule_violation"),
        ("SELEC 1", "42601", "syntax_error_or_access_rule_violation"),
        ("SELECT 1 / 0", "22012", "data_exception"),
        ("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$", "40001", "transaction_rollback"),
    ],
)
def test_database_errors_carry_their_sqlstate(
    tool: PostgresTool, keychain: dict[str, Any], sql: str, sqlstate: str, kind: str
) -> None:
    outcome = run(tool, keychain, command=sql)
    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error["kind"] == kind and outcome.error["sqlstate"] == sqlstate
    assert outcome.to_dict()["pg"] == {"code": sqlstate, "sqlstate": sqlstate}


def test_a_duplicate_key_is_an_integrity_violation_with_detail(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    run(tool, keychain, command="CREATE TABLE t (id int PRIMARY KEY)")
    run(tool, keychain, command="INSERT INTO t VALUES (1)")
    outcome = run(tool, keychain, command="INSERT INTO t VALUES (:id)", params={"id": 1})
    assert outcome.error is not None and outcome.error["kind"] == "integrity_violation"
    assert outcome.extra["pg"]["code"] == "23505" and "(id)=(1)" in outcome.error["detail"]


def test_a_failed_statement_rolls_back_and_the_pool_recovers(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    run(tool, keychain, command="CREATE TABLE t (id int CHECK (id > 0))")
    assert run(tool, keychain, command="INSERT INTO t SELECT generate_series(1, 3) - 1").status == "error"
    assert run(tool, keychain, query="SELECT count(*) AS n FROM t").result["rows"] == [{"n": 0}]


def test_several_statements_with_binds_are_refused(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    outcome = run(tool, keychain, query="SELECT :a; SELECT 2", params={"a": 1})
    assert outcome.extra["pg"]["code"] == "42601"


def test_a_bind_without_a_value_is_a_bad_task(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    outcome = run(tool, keychain, query="SELECT :missing")
    assert outcome.error is not None and outcome.error["kind"] == "bad_task" and "missing" in outcome.error["message"]
    assert outcome.extra["pg"] == {"code": None, "sqlstate": None}


def test_spec_timeout_sets_the_statement_timeout(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    outcome = run(tool, keychain, {"timeout": 0.2}, query="SELECT pg_sleep(5)")
    assert outcome.error is not None and outcome.error["kind"] == "timeout"
    assert outcome.extra["pg"]["code"] == "57014"
    assert run(tool, keychain, query="SHOW statement_timeout").result["rows"] == [{"statement_timeout": "0"}]


def test_wrong_password_is_an_authorization_error_without_the_password(tool: PostgresTool, database_url: str) -> None:
    url = make_url(database_url).set(password="wrong-secret")
    keychain = {"pg_local": {"dsn": url.render_as_string(hide_password=False)}}
    outcome = run(tool, keychain, query="SELECT 1")
    assert outcome.error is not None and outcome.error["kind"] == "invalid_authorization"
    assert outcome.extra["pg"]["code"] == "28P01" and "wrong-secret" not in str(outcome.to_dict())


def _playbook(body: dict[str, Any]) -> PlaybookDoc:
    doc = validate_document({"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "pg"}, **body})
    assert isinstance(doc, PlaybookDoc)
    return doc


def test_policy_retries_a_serialization_failure_until_it_succeeds(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    run(tool, keychain, command="CREATE SEQUENCE tries")
    flaky = (
        "CREATE FUNCTION flaky() RETURNS bigint LANGUAGE plpgsql AS $$ DECLARE n bigint := nextval('tries'); "
        "BEGIN IF n < 3 THEN RAISE EXCEPTION 'try again' USING ERRCODE = '40001'; END IF; RETURN n; END $$"
    )
    assert run(tool, keychain, command=flaky).status == "ok"
    retry = {"do": "retry", "attempts": 5, "backoff": "exponential", "delay": 2.0}
    conflict = "{{ outcome.status == 'error' and outcome.pg.code in ['40001','40P01'] }}"
    doc = _playbook(
        {
            "workflow": [
                {
                    "step": "start",
                    "tool": {
                        "kind": "postgres",
                        "auth": "pg_local",
                        "query": "SELECT flaky() AS n",
                        "spec": {
                            "policy": {
                                "rules": [
                                    {"when": conflict, "then": retry},
                                    {"when": "{{ outcome.status == 'error' }}", "then": {"do": "fail"}},
                                    {"else": {"then": {"do": "continue"}}},
                                ]
                            }
                        },
                    },
                }
            ]
        }
    )
    sink, clock = MemorySink(), FakeClock()
    engine = Engine(tools=ToolRegistry([NoopTool(), tool]), sink=sink, clock=clock)
    result = engine.run(doc, keychain=keychain)
    assert result.status == "completed", result.error
    assert result.results["start"]["rows"] == [{"n": 3}]
    done = [e.payload for e in sink.events if e.event_type == "task.done"]
    assert [d["pg"]["code"] for d in done] == ["40001", "40001", "00000"]
    assert [d["directive"] for d in done] == ["retry", "retry", "continue"]
    assert clock.sleeps == [2.0, 4.0]


def test_a_large_row_set_reaches_events_by_reference(tool: PostgresTool, keychain: dict[str, Any]) -> None:
    doc = _playbook(
        {
            "workflow": [
                {
                    "step": "start",
                    "tool": {
                        "kind": "postgres",
                        "auth": "pg_local",
                        "query": "SELECT g AS id, repeat('x', 100) AS pad FROM generate_series(1, :n) AS g",
                        "params": {"n": "{{ workload.n }}"},
                    },
                }
            ]
        }
    )
    sink, payloads = MemorySink(), MemoryPayloadStore()
    engine = Engine(tools=ToolRegistry([tool]), sink=sink, payloads=payloads, threshold=64 * 1024)
    result = engine.run(doc, {"n": 2000}, keychain=keychain)
    assert result.status == "completed" and result.results["start"]["row_count"] == 2000
    (done,) = [e.payload for e in sink.events if e.event_type == "task.done"]
    assert "result" not in done and done["context"]["row_count"] == 2000
    assert payloads.resolve(done["reference"])["rows"][-1] == {"id": 2000, "pad": "x" * 100}
