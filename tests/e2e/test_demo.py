"""``noetl-cloud demo`` against the local stack, as ``make up`` runs it, and its summary held against the
database: the executions of the run's playbook version, their events, the rows their frames saved,
the spool's replays and replay parity.

The demo runs against the stack's own roles (``local up --roles all``; started here when missing) and
its ``noetl`` database, and stops and restarts the stack's execute role for its outage. Everything it
writes is found by its run: the playbook version it registered, the batches its messages carried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from noetl_cloud.db.engine import normalize_url
from noetl_cloud.demo.fixture import orders_of
from noetl_cloud.demo.setup import (
    DEMO_LOGIN,
    KEYCHAIN_ALIAS,
    LISTENERS,
    PLAYBOOK_PATH,
    RUNTIME_SUBSCRIPTION,
    demo_database_url,
)

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS, MESSAGES, SPOOLED = 1, 2, 1


def _sql(url: str, statement: str, **params: Any) -> list[Any]:
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(statement), params).all())
    finally:
        engine.dispose()


def test_the_demo_runs_every_path_and_its_summary_is_what_the_database_holds(local_env: dict[str, str]) -> None:
    env = {
        **os.environ,
        "NOETL_LOCAL_STATE_DIR": os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state")),
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("noetl-cloud")),
            "demo",
            "--json",
            f"--webhooks={WEBHOOKS}",
            f"--messages={MESSAGES}",
            f"--spooled={SPOOLED}",
            "--timeout=120",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["ok"] and summary["problems"] == []

    database = local_env["NOETL_DATABASE_URL"]
    version = summary["playbook"]["version"]
    rows = _sql(
        database,
        "SELECT execution_id, status, meta->>'subscription_path' FROM execution WHERE path = :p AND version = :v",
        p=PLAYBOOK_PATH,
        v=version,
    )
    sent = WEBHOOKS * len(LISTENERS) + MESSAGES + SPOOLED * len(LISTENERS)
    ids = sorted(str(r[0]) for r in rows)
    assert len(rows) == sent == summary["executions"]["total"] == sum(c["sent"] for c in summary["channels"])
    assert ids == sorted(summary["executions"]["ids"])
    assert {r[1] for r in rows} == {"completed"} and summary["executions"]["completed"] == sent
    by_path = Counter(r[2] for r in rows)
    assert by_path[RUNTIME_SUBSCRIPTION] == MESSAGES
    assert all(by_path[item.path] == WEBHOOKS + SPOOLED for item in LISTENERS)

    # Events: the count the summary gives, and one playbook.completed per execution.
    int_ids = [int(i) for i in ids]
    events = dict(
        _sql(
            database,
            "SELECT event_type, count(*) FROM event WHERE execution_id = ANY(:ids) GROUP BY event_type",
            ids=int_ids,
        )
    )
    assert sum(events.values()) == summary["events"]["written"]
    assert events["playbook.completed"] == sent and events["frame.committed"] == summary["events"]["frames_committed"]

    # Rows: every order of every batch the executions ran on, saved exactly once, by frames of at most 4.
    batches = [
        r[0]
        for r in _sql(
            database,
            "SELECT payload->'workload'->'payload'->>'batch' FROM event"
            " WHERE event_type = 'playbook.started' AND execution_id = ANY(:ids)",
            ids=int_ids,
        )
    ]
    assert len(set(batches)) == sent
    saved = dict(
        _sql(
            demo_database_url(database),
            "SELECT batch, count(*) FROM demo_orders WHERE run = :run GROUP BY batch",
            run=summary["run"],
        )
    )
    assert saved == {b: len(orders_of(b)) for b in batches}
    assert summary["rows"]["saved"] == summary["rows"]["expected"] == sum(saved.values())
    assert events["frame.committed"] >= sum(-(-n // 4) for n in saved.values())

    # The outage: each spooled delivery replayed once, into one of these executions.
    replayed = _sql(
        database,
        "SELECT payload->>'execution_id' FROM event WHERE event_type = 'subscription.message.replayed'"
        " AND ingest_time >= :began",
        began=summary["spool"]["outage_began"],
    )
    assert len(replayed) == SPOOLED * len(LISTENERS) == summary["spool"]["spooled"] == summary["spool"]["replayed"]
    assert {r[0] for r in replayed} <= set(ids) and summary["spool"]["left"] == 0

    # Replay parity: the summary's verdict, and the operator's command on one execution.
    assert summary["replay"] == {"verified": sent, "ok": sent, "drift": {}}
    verified = subprocess.run(
        [str(Path(sys.executable).with_name("noetl-cloud")), "replay", "verify", "--execution-id", ids[0]],
        env={**env, **_stack_env(env)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["ok"] is True

    # The credential (issue #22 item 7): the playbook names `pg_demo`; the worker read the password from
    # the wallet entry keychain-pg_demo, and it is in no row of the control plane, no role's log and no
    # output of the demo; the orders were saved by that login, so the alias did resolve.
    state = Path(env["NOETL_LOCAL_STATE_DIR"])
    entry = json.loads((state / "secrets" / f"keychain-{KEYCHAIN_ALIAS}").read_text())
    password = make_url(entry["dsn"]).password
    assert password and len(password) >= 32 and make_url(entry["dsn"]).username == DEMO_LOGIN
    tables = [
        r[0]
        for r in _sql(
            database,
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        )
    ]
    assert {"event", "command", "execution", "outbox", "projection", "catalog", "frame"} <= set(tables)
    for table in tables:  # every row of every table of the control plane (partitions through their parent)
        found = _sql(database, f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, :p) > 0', p=password)
        assert found == [(0,)], table
    registered = _sql(
        database, "SELECT t::text FROM catalog t WHERE path = :p ORDER BY version DESC LIMIT 1", p=PLAYBOOK_PATH
    )
    assert f"auth: {KEYCHAIN_ALIAS}" in registered[0][0] and "postgresql://" not in registered[0][0]
    logs = [path for path in (state / "logs").iterdir() if path.is_file()]
    assert any((state / "logs" / "worker.log") == path for path in logs)
    assert not [path.name for path in logs if password in path.read_text(errors="replace")]
    assert password not in done.stdout and password not in done.stderr


def _stack_env(env: dict[str, str]) -> dict[str, str]:
    """The control plane's URL and token, as `noetl-cloud local env` exports them."""
    lines = (Path(env["NOETL_LOCAL_STATE_DIR"]) / "env").read_text().splitlines()
    values = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {k: values[k] for k in ("NOETL_API_URL", "NOETL_INTERNAL_API_TOKEN")}
