"""The deployed keychain: task ``auth:`` aliases resolved through the wallet, under a prefix."""

from __future__ import annotations

import json
from pathlib import Path

from noetl_cloud.secrets.keychain import SecretKeychain, parse_entry
from noetl_cloud.secrets.local import LocalSecrets
from noetl_cloud.tools.postgres import credential_url

DSN = "postgresql://orders:s3cret-pw@db.internal:5432/orders"


def test_an_alias_reads_the_prefixed_wallet_secret_as_json_or_a_bare_dsn(tmp_path: Path) -> None:
    (tmp_path / "keychain-pg_json").write_text(json.dumps({"kind": "postgres", "dsn": DSN}))
    (tmp_path / "keychain-pg_bare").write_text(DSN + "\n")
    (tmp_path / "pg_unprefixed").write_text(DSN)
    keychain = SecretKeychain(LocalSecrets({"NOETL_SECRET_KEYCHAIN_PG_ENV": DSN}, tmp_path))
    for alias in ("pg_json", "pg_bare", "pg_env"):
        assert keychain[alias] == {"kind": "postgres", "dsn": DSN}
        assert credential_url(keychain, alias).endswith("@db.internal:5432/orders")
    assert keychain.get("pg_unprefixed") is None  # a wallet secret outside the prefix is not a credential
    assert keychain.get("../keychain-pg_json") is None and keychain.get("") is None


def test_a_missing_alias_is_absent_and_the_keychain_never_shows_a_value(tmp_path: Path) -> None:
    (tmp_path / "keychain-pg").write_text(DSN)
    keychain = SecretKeychain(LocalSecrets({}, tmp_path), fallback={"file_alias": {"kind": "postgres", "dsn": DSN}})
    assert keychain.get("nope") is None and "nope" not in keychain
    assert keychain["file_alias"]["dsn"] == DSN  # a --keychain file's entry first
    assert bool(keychain) and list(keychain) == ["file_alias"]
    assert "s3cret" not in repr(keychain) and "s3cret" not in str(keychain)


def test_a_secret_that_is_neither_json_nor_a_dsn_is_an_unreadable_entry() -> None:
    assert parse_entry("not a credential") == {"kind": "unreadable"}
    assert parse_entry("[1, 2]") == {"kind": "unreadable"}
    assert parse_entry(' {"kind": "postgres", "host": "h"} ') == {"kind": "postgres", "host": "h"}
