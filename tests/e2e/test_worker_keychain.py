"""The deployed keychain (issue #22 item 7): a ``postgres`` task with ``auth:`` run by the worker role,
its credential read from the wallet (``NOETL_SECRETS_DIR/keychain-<alias>``) when the task runs, and its
password in no row of the execution and in no role's log."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from noetl_cloud.db.engine import normalize_url
from tests.e2e.test_distributed import Cluster, cluster
from tests.integration.control_fixtures import Topics

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keychain, path: e2e/keychain}
keychain: [{name: pg_orders, kind: postgres}]
workflow:
  - step: start
    tool: {kind: postgres, auth: pg_orders, query: "SELECT current_user AS who"}
    next: [{step: missing}]
  - step: missing
    tool: {kind: postgres, auth: pg_nowhere, query: "SELECT 1"}
"""
TABLES = ("event", "command", "execution", "outbox", "projection", "stream")


@pytest.fixture
def user(database_url: str) -> Iterator[tuple[str, str]]:
    """A login role of its own, with a password no test fixture knows."""
    name, password = f"kc_{secrets.token_hex(4)}", secrets.token_hex(16)
    admin = create_engine(normalize_url(database_url))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
    yield name, password
    with admin.begin() as conn:
        conn.execute(text(f"DROP ROLE IF EXISTS {name}"))
    admin.dispose()


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    monkeypatch.setenv("NOETL_TEST_LOG_DIR", str(folder))  # every role's output kept, to be searched
    return folder


@pytest.fixture
def workers(
    database_url: str, local_env: dict[str, str], topic_prefix: str, topics: Topics, tmp_path: Path, logs: Path
) -> Iterator[Cluster]:
    wallet = tmp_path / "wallet"
    wallet.mkdir()
    with cluster(database_url, local_env, topic_prefix, NOETL_SECRETS_DIR=str(wallet), NOETL_LOG_LEVEL="DEBUG") as c:
        c.wallet = wallet  # type: ignore[attr-defined]
        c.register(PLAYBOOK)
        yield c


def test_a_postgres_task_reads_its_credential_from_the_wallet_and_writes_it_nowhere(
    workers: Cluster, database_url: str, user: tuple[str, str], logs: Path
) -> None:
    name, password = user
    dsn = make_url(database_url).set(username=name, password=password).render_as_string(hide_password=False)
    (workers.wallet / "keychain-pg_orders").write_text(json.dumps({"kind": "postgres", "dsn": dsn}))  # type: ignore[attr-defined]

    detail = workers.wait(workers.execute("e2e/keychain"))

    assert detail["results"]["start"]["rows"] == [{"who": name}]  # connected as the wallet's user
    assert detail["status"] == "failed"  # the second step's alias has no secret
    assert "unknown_credential" in json.dumps(detail["error"]) and "pg_nowhere" in json.dumps(detail["error"])
    engine = create_engine(normalize_url(database_url))
    with engine.connect() as conn:
        for table in TABLES:
            rows = conn.execute(text(f"SELECT t::text FROM {table} t")).scalars().all()
            assert rows or table not in ("event", "command", "execution")
            assert not any(password in row for row in rows), table
    engine.dispose()
    written = "".join(path.read_text(errors="replace") for path in logs.iterdir())
    assert "command claimed" in written  # the worker's log lines were captured
    assert password not in written
