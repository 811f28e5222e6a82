"""The wallet: secrets resolved by alias, never read from plain settings, never logged."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from noetl_cloud.secrets.port import SecretNotFound, SecretResolver

if TYPE_CHECKING:
    from noetl_cloud.settings import Settings

__all__ = ["SecretNotFound", "SecretResolver", "resolver_from_settings"]


def resolver_from_settings(settings: Settings, env: Mapping[str, str]) -> SecretResolver:
    """The deployment's wallet: Secret Manager (``NOETL_SECRETS_BACKEND=secret_manager``), else the
    ``NOETL_SECRET_<ALIAS>`` variables of ``env`` and the files of ``NOETL_SECRETS_DIR``."""
    if settings.secrets_backend == "secret_manager":
        from noetl_cloud.secrets.secret_manager import SecretManagerSecrets

        settings.require("project_id")
        assert settings.project_id is not None
        return SecretManagerSecrets(settings.project_id)
    from noetl_cloud.secrets.local import LocalSecrets

    return LocalSecrets(env, Path(settings.secrets_dir) if settings.secrets_dir else None)
