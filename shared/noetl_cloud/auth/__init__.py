"""Authentication of callers: Google-signed OIDC ID tokens and the internal API's credentials."""

from noetl_cloud.auth.google_oidc import GoogleIdentity, JwksCache, verify_google_id_token
from noetl_cloud.auth.internal import Caller, InternalAuth, install

__all__ = ["Caller", "GoogleIdentity", "InternalAuth", "JwksCache", "install", "verify_google_id_token"]
