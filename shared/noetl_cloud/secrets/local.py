"""Local secrets: ``NOETL_SECRET_<ALIAS>`` variables, or one file per alias in a folder.

The alias ``stripe_webhook_secret`` is read from ``NOETL_SECRET_STRIPE_WEBHOOK_SECRET`` (letters
upper-cased, every other character ``_``), else from ``<folder>/stripe_webhook_secret``.
For the local stack and tests; Google Cloud uses Secret Manager.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from noetl_cloud.secrets.port import SecretNotFound, check_alias


def variable_name(alias: str) -> str:
    return "NOETL_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", alias).upper()


class LocalSecrets:
    def __init__(self, env: Mapping[str, str], folder: Path | None = None) -> None:
        self._env = {k: v for k, v in env.items() if k.startswith("NOETL_SECRET_")}
        self._folder = folder

    def resolve(self, alias: str) -> str:
        check_alias(alias)
        value = self._env.get(variable_name(alias))
        if value is not None:
            return value
        if self._folder is not None:
            path = self._folder / alias
            if path.is_file():
                return path.read_text().rstrip("\n")
        raise SecretNotFound(f"secret alias {alias!r} is not defined (set {variable_name(alias)})")
