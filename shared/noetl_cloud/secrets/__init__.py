"""The wallet: secrets resolved by alias, never read from plain settings, never logged."""

from noetl_cloud.secrets.port import SecretNotFound, SecretResolver

__all__ = ["SecretNotFound", "SecretResolver"]
