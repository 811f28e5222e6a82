"""``noetl-cloud spool ls|show|drain|dlq|resend``: what an operator does with a subscription's spool.

The spool is found as the roles find it: ``--backend`` with ``--bucket`` / ``--dir`` when given;
else the subscription's own ``spool`` block from the control plane (``NOETL_API_URL``) combined
with ``NOETL_SPOOL_*``; else the deployment's spool (``NOETL_SPOOL_BACKEND`` / ``_BUCKET`` /
``_DIR``). ``drain`` runs the drainer in this process (leases make that safe beside the role).

With a control plane to ask (``NOETL_API_URL``), a subscription the catalog does not have is an error
(404 ``subscription_not_found``, exit 2), never an empty listing; when the control plane does not
answer (mid-outage, which is when an operator looks) the spool is read all the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from noetl_cloud.errors import BadRequest, ConfigError, NotFound, Unavailable
from noetl_cloud.settings import Settings
from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool.backends import SettingsBackends
from noetl_cloud.spool.events import spool_ref
from noetl_cloud.spool.item import SpoolRef
from noetl_cloud.spool.port import SpoolBackend
from noetl_cloud.spool.target import SpoolTarget

Print = Callable[[str], None]


def open_spool(settings: Settings, subscription: str, backend: str | None, where: str | None) -> SpoolBackend:
    target = registered(settings, subscription) if settings.api_url else None
    if backend is not None:
        if not where:
            raise BadRequest("--backend needs --bucket (gcs, s3) or --dir (local_disk)", code="usage")
        field = "spool_dir" if backend == "local_disk" else "spool_bucket"
        settings = settings.model_copy(update={"spool_backend": backend, field: where})
        return SettingsBackends(settings).resolve(Spool())[0]
    backends = SettingsBackends(settings)
    if settings.spool_backend is None and target is not None and target.enabled:
        return backends.resolve(target.spool)[0]
    default = backends.default()
    if default is None:
        raise ConfigError(
            "no spool to look in: give --backend and --bucket/--dir, or set NOETL_SPOOL_BACKEND and "
            "NOETL_SPOOL_BUCKET (or NOETL_SPOOL_DIR), or NOETL_API_URL",
            code="config_missing",
        )
    return default[0]


def registered(settings: Settings, subscription: str) -> SpoolTarget | None:
    """The subscription's spool target in the catalog of ``settings.api_url``; :class:`NotFound` when the
    catalog has no such subscription; ``None`` when the control plane cannot be asked."""
    from noetl_cloud.spool.bootstrap import CatalogTargets, api_client, downstream_of

    try:
        target = CatalogTargets(api_client(settings, retries=0), downstream_of(settings)).target(subscription)
    except Unavailable:  # mid-outage: the spool is read all the same
        return None
    if target is None:
        raise NotFound(
            f"no subscription {subscription} in the catalog of {settings.api_url}", code="subscription_not_found"
        )
    return target


def _rows(spool: SpoolBackend, subscription: str, *, dlq: bool, lane: str | None, limit: int) -> list[dict[str, Any]]:
    rows = []
    for ref in spool.list(subscription, lane, limit=limit, dlq=dlq):
        item, _payload = spool.get(ref)
        rows.append(item.listing(ref.name, dead=dlq))
    return rows


def ls(
    spool: SpoolBackend,
    subscription: str,
    out: Print,
    *,
    dlq: bool = False,
    lane: str | None = None,
    limit: int = 100,
    as_json: bool = False,
) -> int:
    """One line per item (receive order within each lane), then the totals."""
    rows = _rows(spool, subscription, dlq=dlq, lane=lane, limit=limit)
    count, size = spool.usage(subscription, dlq=dlq)
    if as_json:
        out(
            json.dumps(
                {"subscription": subscription, "dlq": dlq, "items": count, "bytes": size, "list": rows}, indent=2
            )
        )
        return 0
    out(f"{'lane':<24} {'recv_seq':>20} {'attempts':>8} {'bytes':>9}  {'reason':<20} message_id")
    for row in rows:
        out(
            f"{row['lane']:<24} {row['recv_seq']:>20} {row['attempts']:>8} {row['bytes']:>9}  "
            f"{row['reason']!s:<20} {row['message_id']}"
        )
    shown = f" (first {len(rows)} shown)" if len(rows) < count else ""
    out(f"{count} {'dead-lettered' if dlq else 'spooled'} item(s), {size} bytes{shown}")
    return 0


def show(spool: SpoolBackend, name: str, out: Print, *, payload: bool = False) -> int:
    """The item's record (and, with ``payload``, its payload as text when it is UTF-8)."""
    item, data = spool.get(SpoolRef(name, None, 0))
    record: dict[str, Any] = {"ref": spool_ref(name), **item.model_dump(mode="json")}
    if payload:
        try:
            record["payload"] = data.decode("utf-8")
        except UnicodeDecodeError:
            record["payload_hex"] = data.hex()
    out(json.dumps(record, indent=2, ensure_ascii=False))
    return 0


def drain(settings: Settings, subscription: str, out: Print, *, resume: bool = False) -> int:
    from noetl_cloud.spool.bootstrap import drain_service

    reports = drain_service(settings).run([subscription], resume=resume)
    out(json.dumps({"results": reports}, indent=2))
    return 0 if all(r.get("state") in ("drained", "empty") for r in reports) else 1


def resend(
    spool: SpoolBackend,
    subscription: str,
    out: Print,
    *,
    item: str | None = None,
    lane: str | None = None,
    reason: str | None = None,
    progress: Print | None = None,
) -> dict[str, Any]:
    """Dead letters back to their lanes (receive order kept): ``item`` (one name, as ``spool dlq`` prints
    it), else every one of the subscription (of ``lane``, with ``reason``). Progress goes to ``progress``."""
    from noetl_cloud.errors import NoetlError
    from noetl_cloud.spool.item import SpoolItemNotFound, dlq_prefix
    from noetl_cloud.spool.manage import Filter, matching

    if item is not None:
        if not item.startswith(dlq_prefix(subscription)):
            raise BadRequest(f"{item!r} is not a dead letter of {subscription}", code="not_a_dead_letter")
        refs = [SpoolRef(item, None, 0)]
    else:
        refs = [ref for ref, _item in matching(spool, Filter(subscription, lane, reason))]
    summary: dict[str, Any] = {
        "subscription": subscription,
        "matched": len(refs),
        "resent": 0,
        "failed": 0,
        "errors": [],
    }
    for ref in refs:
        try:
            spool.resend(ref)
            summary["resent"] += 1
        except SpoolItemNotFound:
            if item is not None:
                raise
            summary["resent"] += 1  # resent by someone else meanwhile
        except NoetlError as exc:
            summary["failed"] += 1
            summary["errors"].append({"name": ref.name, "code": exc.code})
        if progress is not None:
            progress(f"resent {summary['resent']} of {len(refs)}, failed {summary['failed']}")
    out(json.dumps(summary, indent=2))
    return summary
