"""The secrets port: resolve a secret alias (a wallet name) to its value."""

from __future__ import annotations

import re
from typing import Protocol

from noetl_cloud.errors import NotFound

ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")


class SecretNotFound(NotFound):
    """No secret has that alias (the message names the alias, never a value)."""

    code = "secret_not_found"


class SecretResolver(Protocol):
    def resolve(self, alias: str) -> str:
        """The current value of the secret named ``alias``; :class:`SecretNotFound` when absent."""
        ...


def check_alias(alias: str) -> str:
    if not ALIAS.match(alias):
        raise SecretNotFound(f"invalid secret alias {alias!r}", code="secret_alias_invalid")
    return alias
