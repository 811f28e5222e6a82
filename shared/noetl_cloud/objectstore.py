"""Clients of the object stores the spool and the payload store write to, built one way.

* :func:`gcs_client`: Cloud Storage; with an ``endpoint`` (the GCS emulator) anonymous credentials,
  else Application Default Credentials.
* :func:`s3_client`: S3 (or moto's server at ``endpoint_url``) with bounded timeouts and standard
  retries; ``boto3`` is imported here, on first use.
* :data:`GCS_OUTAGE`: the Cloud Storage errors that mean "unavailable, retry later".
"""

from __future__ import annotations

from typing import Any, Final

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[attr-defined,import-untyped]

GCS_OUTAGE: Final = (
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.BadGateway,
    gexc.GatewayTimeout,
    gexc.TooManyRequests,
    gexc.RetryError,
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    auth_exc.TransportError,
    auth_exc.RefreshError,
)


def gcs_client(endpoint: str | None, project_id: str | None) -> storage.Client:
    """A Cloud Storage client: the emulator at ``endpoint``, or Google with its default credentials."""
    if endpoint:
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(
            project=project_id or "noetl-local",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": endpoint},
        )
    import google.auth

    credentials, project = google.auth.default()
    return storage.Client(project=project_id or project, credentials=credentials)


def s3_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    access_key_id: str | None,
    secret_access_key: str | None,
    timeout_s: float,
) -> Any:
    """An S3 client; without keys boto3's own credential chain applies."""
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"mode": "standard", "max_attempts": 3},
        ),
    )
