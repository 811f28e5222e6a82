"""The payload store a deployment's settings describe (``NOETL_PAYLOAD_BACKEND`` and its location)."""

from __future__ import annotations

from noetl_cloud.errors import ConfigError
from noetl_cloud.payload.port import ObjectPayloadStore
from noetl_cloud.settings import Settings


def payload_store(settings: Settings) -> ObjectPayloadStore | None:
    """The configured store, or ``None`` when no backend is set. Nothing connects here."""
    backend = settings.payload_backend
    tenant, org = settings.tenant_id, settings.organization_id
    if backend is None:
        return None
    if backend == "filesystem":
        settings.require("payload_dir")
        from noetl_cloud.payload.filesystem import FilesystemPayloadStore

        return FilesystemPayloadStore(str(settings.payload_dir), tenant_id=tenant, organization_id=org)
    settings.require("payload_bucket")
    bucket = str(settings.payload_bucket)
    if backend == "gcs":
        from noetl_cloud.payload.gcs import GcsPayloadStore

        return GcsPayloadStore(
            bucket,
            tenant_id=tenant,
            organization_id=org,
            endpoint=settings.storage_emulator_host,
            project_id=settings.project_id,
        )
    if backend == "s3":
        from noetl_cloud.payload.s3 import S3PayloadStore

        return S3PayloadStore(bucket, tenant_id=tenant, organization_id=org, endpoint_url=settings.s3_endpoint_url)
    raise ConfigError(f"unknown payload backend {backend!r}", code="config_invalid")
