"""Authentication of a Pub/Sub push endpoint (the worker's, the projector's).

Deployed, the push subscription signs a Google ID token as its push service account for the
endpoint's URL (``NOETL_<ROLE>_PUSH_AUDIENCE`` + ``_PUSH_SERVICE_ACCOUNT``). Locally a bearer token
(``NOETL_<ROLE>_PUSH_TOKEN``) stands in; the emulator's push sends no credentials, so it may come as
the endpoint's ``?token=`` and is then compared like a bearer.
"""

from __future__ import annotations

from flask import request

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.auth.roles import PUSH
from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings


def push_auth(settings: Settings, role: str) -> InternalAuth:
    """The push authentication of ``role`` (``worker``, ``projector``): its settings ``<role>_push_*``."""
    audience = getattr(settings, f"{role}_push_audience")
    token = getattr(settings, f"{role}_push_token")
    account = getattr(settings, f"{role}_push_service_account")
    if audience:
        settings.require(f"{role}_push_service_account")
    elif token is None:
        names = [Settings.env_name(f"{role}_push_token"), Settings.env_name(f"{role}_push_audience")]
        raise ConfigError(
            f"the {role}'s push endpoint has no authentication: set {' or '.join(names)}",
            code="config_missing",
            details={"variables": names},
        )
    return InternalAuth(token=token, roles={PUSH}, audience=audience, allowed_emails=[account] if account else None)


def push_credentials(settings: Settings, role: str) -> str | None:
    """The ``Authorization`` of this push, or the local token of ``?token=`` when one is configured."""
    header = request.headers.get("Authorization")
    if header is None and getattr(settings, f"{role}_push_token") is not None and "token" in request.args:
        return f"Bearer {request.args['token']}"
    return header
