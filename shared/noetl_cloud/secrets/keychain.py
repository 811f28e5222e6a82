"""The deployed keychain: a task's ``auth:`` alias resolved through the wallet when the task runs.

A playbook names credentials by alias (``auth: pg_orders``); the CLI's ``--keychain FILE`` maps aliases
to entries for local runs. A deployed worker resolves the alias ``pg_orders`` from the wallet secret
``keychain-pg_orders`` (``NOETL_KEYCHAIN_PREFIX``): a Secret Manager secret in the cloud (the worker's
service account may read only the secrets Terraform lists in ``keychain_secrets``), the file
``NOETL_SECRETS_DIR/keychain-pg_orders`` or the variable ``NOETL_SECRET_KEYCHAIN_PG_ORDERS`` locally.
The prefix keeps task credentials apart from the control plane's webhook secrets: a task cannot name
a listener's secret as its credential.

A secret holds the entry as JSON (``{"kind": "postgres", "dsn": "postgresql://..."}`` or
``{"kind": "postgres", "host": ..., "user": ..., "password": ..., "database": ...}``), or a bare
``postgresql://`` DSN. Values are read when a task asks for them (Secret Manager's reads are cached
for a minute, so a rotation takes effect within it), handed to the tool only, and never written to an
event, a log line or a spool object: the tools report an alias, never an entry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from noetl_cloud.secrets.port import ALIAS, SecretNotFound, SecretResolver

DEFAULT_PREFIX = "keychain-"
_DSN_SCHEMES = ("postgresql://", "postgres://", "postgresql+pg8000://")


class SecretKeychain(Mapping[str, Any]):
    """Keychain aliases resolved on demand through a :class:`SecretResolver` (see the module).

    Aliases are not listed: iterating gives nothing and ``len`` is 0, and an alias with no secret is
    missing (``get`` answers ``None``, so a tool reports ``unknown_credential``). ``fallback`` (the
    entries of a ``--keychain`` file, say) is asked first.
    """

    def __init__(
        self, resolver: SecretResolver, *, prefix: str = DEFAULT_PREFIX, fallback: Mapping[str, Any] | None = None
    ) -> None:
        self._resolver = resolver
        self._prefix = prefix
        self._fallback = fallback or {}

    def __getitem__(self, alias: str) -> Any:
        if alias in self._fallback:
            return self._fallback[alias]
        name = f"{self._prefix}{alias}" if isinstance(alias, str) else ""
        if not ALIAS.match(name):
            raise KeyError(alias)
        try:
            raw = self._resolver.resolve(name)
        except SecretNotFound:
            raise KeyError(alias) from None
        return parse_entry(raw)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fallback)

    def __len__(self) -> int:
        return len(self._fallback)

    def __bool__(self) -> bool:
        return True  # resolvable aliases exist even when none is listed

    def __repr__(self) -> str:
        return f"SecretKeychain(prefix={self._prefix!r})"  # never the entries


def parse_entry(raw: str) -> dict[str, Any]:
    """The keychain entry a secret's text holds: a JSON object, or a bare PostgreSQL DSN. Anything else
    is an entry of kind ``unreadable`` (the tool refuses it as ``bad_credential`` without echoing it)."""
    text = raw.strip()
    if text.startswith(_DSN_SCHEMES):
        return {"kind": "postgres", "dsn": text}
    try:
        entry = json.loads(text)
    except ValueError:
        return {"kind": "unreadable"}
    return entry if isinstance(entry, dict) else {"kind": "unreadable"}
