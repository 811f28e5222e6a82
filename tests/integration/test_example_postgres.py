"""``examples/postgres.yaml`` against the local stack's PostgreSQL, with a keychain file made as its header
says: the table is created, the workload's names inserted once (a second run adds nothing) and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_cloud.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_postgres_example_runs_with_a_keychain_file(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keychain = tmp_path / "keychain.yaml"
    keychain.write_text(f'pg_local: {{kind: postgres, dsn: "{database_url}"}}\n')
    monkeypatch.chdir(ROOT)
    for names, people in (("[ada, grace]", 2), ("[grace, linus]", 3)):
        code = main(
            ["run", "examples/postgres.yaml", "--keychain", str(keychain), "--set", f"names={names}", "--quiet"]
        )
        printed = json.loads(capsys.readouterr().out)
        assert code == 0 and printed["status"] == "completed", printed["error"]
        assert printed["results"]["start"]["rows"] == [{"people": people}]
