"""The catalog: immutable, versioned playbooks and subscriptions.

Registering content that is byte-identical to a stored version of the same path returns that
version; anything else becomes the next version, recorded by a ``catalog.registered`` event on
the stream ``catalog/<path>`` whose version equals the catalog version (the append is the
compare-and-set that keeps two concurrent registrations from taking one number).

A subscription is checked against the rest of the deployment when it is registered, never later:
its playbooks must be registered, its pools configured, its gateway path its own.

Entries are immutable, so the execute path reads them through :class:`CatalogCache`: an entry is
cached by its id and by ``(path, version)`` for good; "the latest version of a path" is cached too,
but a writer that relied on it checks it inside its own write statement (:meth:`CatalogCache.guard`),
so a version registered before the request, by any process, is never missed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, select, text

from noetl_cloud.db.schema import catalog
from noetl_cloud.engine.validate import validate_playbook
from noetl_cloud.envelope import EventFactory, sha256_hex
from noetl_cloud.errors import Conflict, NotFound, ValidationFailed
from noetl_cloud.eventlog.postgres import PostgresEventStore
from noetl_cloud.eventlog.relay import OutboxRow
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.spec import Document, parse_document
from noetl_cloud.spec.playbook import PlaybookDoc
from noetl_cloud.spec.subscription import SubscriptionDoc


@dataclass(frozen=True)
class CatalogEntry:
    catalog_id: str
    path: str
    version: int
    kind: str
    content: str
    content_sha256: str
    document: dict[str, Any]
    gateway_path: str | None
    created_at: datetime

    def summary(self) -> dict[str, Any]:
        return {
            "catalog_id": self.catalog_id,
            "path": self.path,
            "version": self.version,
            "kind": self.kind,
            "content_sha256": self.content_sha256,
            "created_at": self.created_at.isoformat(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "content": self.content, "document": self.document}


def _entry(row: Any) -> CatalogEntry:
    m = row._mapping
    return CatalogEntry(
        catalog_id=str(m["catalog_id"]),
        path=m["path"],
        version=m["version"],
        kind=m["kind"],
        content=m["content"],
        content_sha256=m["content_sha256"],
        document=m["document"],
        gateway_path=m["gateway_path"],
        created_at=m["created_at"],
    )


class PlaybookNotFound(NotFound):
    code = "playbook_not_found"


CatalogKey = tuple[str | None, int | None, str | None]  # (path, version, catalog_id) of a request


class CatalogCache:
    """Catalog entries of one process, by id and by ``(path, version)``; the latest version of a path
    as last seen. Bounded: cleared whole past ``limit`` entries. Safe to share between threads."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._by_id: dict[int, CatalogEntry] = {}
        self._by_version: dict[tuple[str, int], CatalogEntry] = {}
        self._latest: dict[str, CatalogEntry] = {}
        self._lock = threading.Lock()

    def lookup(self, key: CatalogKey) -> CatalogEntry | None:
        path, version, catalog_id = key
        with self._lock:
            if catalog_id is not None:
                return self._by_id.get(int(catalog_id))
            assert path is not None
            return self._by_version.get((path, version)) if version else self._latest.get(path)

    def remember(self, entry: CatalogEntry, *, latest: bool) -> None:
        with self._lock:
            if len(self._by_id) >= self.limit:
                self._by_id.clear()
                self._by_version.clear()
                self._latest.clear()
            self._by_id[int(entry.catalog_id)] = entry
            self._by_version[(entry.path, entry.version)] = entry
            current = self._latest.get(entry.path)
            if latest and (current is None or current.version <= entry.version):
                self._latest[entry.path] = entry

    def forget_latest(self, paths: Iterable[str]) -> None:
        with self._lock:
            for path in paths:
                self._latest.pop(path, None)

    @staticmethod
    def guard(latest: Iterable[CatalogEntry], tenant_id: str, organization_id: str) -> tuple[str, dict[str, Any]]:
        """A SQL boolean (with its parameters) that is true only while each entry is still the latest
        version of its path: the check a write statement makes before it writes anything."""
        pairs = sorted({(e.path, e.version) for e in latest})
        if not pairs:
            return "TRUE", {}
        return (
            "NOT EXISTS (SELECT 1 FROM jsonb_to_recordset(CAST(:g_latest AS jsonb)) AS x(path text, version int) "
            "WHERE (SELECT max(c.version) FROM catalog c WHERE c.tenant_id = :g_t AND c.organization_id = :g_o "
            "AND c.path = x.path) IS DISTINCT FROM x.version)",
            {
                "g_latest": json.dumps([{"path": p, "version": v} for p, v in pairs]),
                "g_t": tenant_id,
                "g_o": organization_id,
            },
        )


class CatalogService:
    def __init__(
        self,
        engine: Engine,
        store: PostgresEventStore,
        ids: SnowflakeGenerator,
        events: EventFactory,
        *,
        tenant_id: str,
        organization_id: str,
        pools: tuple[str, ...],
    ) -> None:
        self.engine = engine
        self.store = store
        self.ids = ids
        self.events = events
        self.tenant_id = tenant_id
        self.organization_id = organization_id
        self.pools = pools
        self.cache = CatalogCache()

    def _scope(self) -> Any:
        return and_(catalog.c.tenant_id == self.tenant_id, catalog.c.organization_id == self.organization_id)

    # -- register -----------------------------------------------------------------------------

    def register(self, content: str) -> tuple[CatalogEntry, bool]:
        """Validate and store ``content``; ``(entry, created)``."""
        document = parse_document(content)
        if isinstance(document, PlaybookDoc):
            validate_playbook(document)
        digest = sha256_hex(content)
        gateway_path = None
        if isinstance(document, SubscriptionDoc) and document.spec.ingress is not None:
            gateway_path = document.spec.ingress.gateway_path
        rows: list[OutboxRow] = []
        with self.engine.begin() as conn:
            self._lock(conn, f"catalog:{self.tenant_id}:{self.organization_id}:{document.path}")
            if gateway_path:
                self._lock(conn, f"gateway:{gateway_path}")
            existing = conn.execute(
                select(catalog).where(
                    self._scope(), catalog.c.path == document.path, catalog.c.content_sha256 == digest
                )
            ).first()
            if existing is not None:
                return _entry(existing), False
            latest = conn.execute(
                select(catalog.c.kind, catalog.c.version)
                .where(self._scope(), catalog.c.path == document.path)
                .order_by(catalog.c.version.desc())
                .limit(1)
            ).first()
            if latest is not None and latest.kind != document.kind:
                raise Conflict(
                    f"{document.path} is a {latest.kind}; a {document.kind} cannot take its path",
                    code="catalog_kind_mismatch",
                    details={"path": document.path, "kind": latest.kind},
                )
            if isinstance(document, SubscriptionDoc):
                self._check_subscription(conn, document)
            version = (latest.version if latest is not None else 0) + 1
            entry = self._insert(conn, document, content, digest, version, gateway_path, rows)
        self.store.hand_off(rows)
        self.cache.remember(entry, latest=True)
        return entry, True

    @staticmethod
    def _lock(conn: Connection, key: str) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": key})

    def _insert(
        self,
        conn: Connection,
        document: Document,
        content: str,
        digest: str,
        version: int,
        gateway_path: str | None,
        outbox: list[OutboxRow],
    ) -> CatalogEntry:
        catalog_id = self.ids.next_id()
        body = document.model_dump(mode="json", by_alias=True, exclude_none=True)
        row = conn.execute(
            catalog.insert()
            .values(
                catalog_id=catalog_id,
                tenant_id=self.tenant_id,
                organization_id=self.organization_id,
                path=document.path,
                version=version,
                kind=document.kind,
                content=content,
                content_sha256=digest,
                document=body,
                gateway_path=gateway_path,
            )
            .returning(*catalog.c)
        ).one()
        stream = f"catalog/{document.path}"
        event = self.events.new(
            "catalog.registered",
            stream_id=stream,
            aggregate_type="catalog",
            aggregate_id=str(catalog_id),
            payload={
                "catalog_id": str(catalog_id),
                "path": document.path,
                "version": version,
                "kind": document.kind,
                "content_sha256": digest,
            },
            idempotency_key=f"{self.tenant_id}/{self.organization_id}/catalog/{document.path}/{version}",
        )
        self.store.append_in(conn, stream, [event], expected_version=version - 1, outbox=outbox)
        return _entry(row)

    def _check_subscription(self, conn: Connection, doc: SubscriptionDoc) -> None:
        problems: list[dict[str, str]] = []
        spec = doc.spec
        playbooks = {
            p
            for (p,) in conn.execute(
                select(catalog.c.path).distinct().where(self._scope(), catalog.c.kind == "Playbook")
            )
        }
        if spec.dispatch.playbook not in playbooks:
            problems.append(
                _problem("spec.dispatch.playbook", f"playbook {spec.dispatch.playbook!r} is not registered")
            )
        if spec.dispatch.execution_pool and spec.dispatch.execution_pool not in self.pools:
            problems.append(_problem("spec.dispatch.execution_pool", self._pool_message(spec.dispatch.execution_pool)))
        for i, directive in enumerate(spec.headers.directives):
            if directive.controls == "dispatch.playbook":
                for target in directive.allowed or []:
                    if target not in playbooks:
                        problems.append(
                            _problem(f"spec.headers.directives.{i}.allowed", f"playbook {target!r} is not registered")
                        )
            elif directive.controls == "dispatch.execution_pool":
                for pool in directive.allowed or []:
                    if pool not in self.pools:
                        problems.append(_problem(f"spec.headers.directives.{i}.allowed", self._pool_message(pool)))
            elif directive.controls == "priority":
                for pool in (directive.map or {}).values():
                    if pool not in self.pools:
                        problems.append(_problem(f"spec.headers.directives.{i}.map", self._pool_message(pool)))
        if spec.ingress is not None and spec.ingress.gateway_path:
            latest = (
                select(catalog.c.path, func.max(catalog.c.version).label("version"))
                .where(catalog.c.kind == "Subscription")
                .group_by(catalog.c.tenant_id, catalog.c.organization_id, catalog.c.path)
                .subquery()
            )
            owner = conn.execute(
                select(catalog.c.path)
                .join(latest, and_(catalog.c.path == latest.c.path, catalog.c.version == latest.c.version))
                .where(catalog.c.gateway_path == spec.ingress.gateway_path, catalog.c.path != doc.path)
                .limit(1)
            ).scalar()
            if owner is not None:
                problems.append(
                    _problem("spec.ingress.gateway_path", f"{spec.ingress.gateway_path} is already claimed by {owner}")
                )
        if problems:
            raise ValidationFailed("subscription refers to what the deployment does not have", details=problems)

    def _pool_message(self, pool: str) -> str:
        return f"execution pool {pool!r} is not configured (pools: {', '.join(self.pools)})"

    # -- read ---------------------------------------------------------------------------------

    def get(self, path: str, version: int | None = None) -> CatalogEntry:
        with self.engine.connect() as conn:
            return self.read(conn, (path, version, None))

    def read(self, conn: Connection, key: CatalogKey) -> CatalogEntry:
        """The entry ``key`` names (by id, by path and version, or the latest of a path), read on
        ``conn``, and remembered in :attr:`cache`; :class:`NotFound` (``catalog_not_found``)."""
        path, version, catalog_id = key
        query = select(catalog).where(self._scope())
        if catalog_id is not None:
            query = query.where(catalog.c.catalog_id == int(catalog_id))
        else:
            query = query.where(catalog.c.path == path)
            query = query.where(catalog.c.version == version) if version else query.order_by(catalog.c.version.desc())
        row = conn.execute(query.limit(1)).first()
        if row is None:
            what = catalog_id if catalog_id is not None else f"{path}{f' version {version}' if version else ''}"
            raise NotFound(f"no catalog entry {what}", code="catalog_not_found")
        entry = _entry(row)
        self.cache.remember(entry, latest=catalog_id is None and not version)
        return entry

    def resolve(self, conn: Connection, key: CatalogKey) -> tuple[CatalogEntry, bool]:
        """The entry ``key`` names, from the cache when it holds it (no round trip), else read on
        ``conn``; and whether it was a cached "latest" that the caller's write must guard."""
        cached = self.cache.lookup(key)
        if cached is not None:
            return cached, key[2] is None and not key[1]
        return self.read(conn, key), False

    def list(self, kind: str | None = None) -> list[CatalogEntry]:
        """The latest version of every path (optionally of one kind)."""
        query = (
            select(catalog)
            .distinct(catalog.c.path)
            .where(self._scope())
            .order_by(catalog.c.path, catalog.c.version.desc())
        )
        if kind:
            query = query.where(catalog.c.kind == kind)
        with self.engine.connect() as conn:
            return [_entry(r) for r in conn.execute(query)]

    def subscription_for_listener(self, gateway_path: str) -> CatalogEntry:
        """The latest subscription version that claims ``gateway_path``."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(catalog)
                .where(self._scope(), catalog.c.kind == "Subscription", catalog.c.gateway_path == gateway_path)
                .order_by(catalog.c.version.desc())
                .limit(1)
            ).first()
        if row is None:
            raise NotFound(f"no subscription listens on {gateway_path}", code="unknown_listener")
        entry = _entry(row)
        latest = self.get(entry.path)
        if latest.gateway_path != gateway_path:  # a newer version moved to another path
            raise NotFound(f"no subscription listens on {gateway_path}", code="unknown_listener")
        return latest


def _problem(field: str, problem: str) -> dict[str, str]:
    return {"field": field, "problem": problem, "type": "reference"}
