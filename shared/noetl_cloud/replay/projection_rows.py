"""The projection's surface rows (``projection``): pages of a surface's rows
(:mod:`noetl_cloud.replay.pages`), written only when a fold changes them, so each carries the event
count it was last written at (``version`` <= the tracking row's); the last page of a surface carries
its checksum. Their reads and their one write with the tracking row (:mod:`noetl_cloud.replay.postgres`
reads the events and the tracking row).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, text

from noetl_cloud.db.bulk import InsertBatch, as_bytea
from noetl_cloud.db.schema import projection, projection_tracking
from noetl_cloud.envelope import canonical_json
from noetl_cloud.replay.pages import PagedRows
from noetl_cloud.replay.postgres import DIGEST_HEX, KINDS, SCOPE, Tracking, scope_params
from noetl_cloud.replay.state import LINEAGE, SURFACES, ReplayState, surface_checksum

# A surface's checksum is its last page's (stored as its bytes, migration 0017; read as hex).
_CHECKSUMS = text(
    "SELECT DISTINCT ON (projection_type) projection_type, encode(checksum, 'hex') AS checksum FROM projection "
    f"WHERE {SCOPE} "
    "ORDER BY projection_type, page DESC"
)
_SURFACES = text(
    f"SELECT projection_type, page, version, state, {DIGEST_HEX}, reducer_version FROM projection "
    f"WHERE {SCOPE} AND projection_type = ANY(:kinds) ORDER BY projection_type, page"
)
_HEADERS = text(
    f"SELECT projection_type, page, version, {DIGEST_HEX}, reducer_version FROM projection "
    f"WHERE {SCOPE} ORDER BY projection_type, page"
)
_TRACKING_UPSERT_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id) DO UPDATE SET "
    "version = EXCLUDED.version, position = EXCLUDED.position, last_event_id = EXCLUDED.last_event_id, "
    "upcaster_registry_digest = EXCLUDED.upcaster_registry_digest, reducer_version = EXCLUDED.reducer_version, "
    "event_time_watermark = EXCLUDED.event_time_watermark, lag_ms = EXCLUDED.lag_ms, "
    "projected_at = EXCLUDED.projected_at, row_kinds = EXCLUDED.row_kinds "
    "WHERE projection_tracking.version < EXCLUDED.version "
    "OR projection_tracking.upcaster_registry_digest <> EXCLUDED.upcaster_registry_digest "
    "OR projection_tracking.reducer_version <> EXCLUDED.reducer_version "
    # a refold at the same version (the same events) lists the kinds it stored
    "OR (projection_tracking.version = EXCLUDED.version "
    "AND projection_tracking.row_kinds IS DISTINCT FROM EXCLUDED.row_kinds)"
)
# A fold that read the tracking row without locking it writes only if that row is still what it read (or,
# for a first fold, if there is none): the tracking row is written first and the surface rows only with it.
_TRACKING_IF_UNCHANGED_SUFFIX = (
    "ON CONFLICT (tenant_id, organization_id, execution_id) DO UPDATE SET "
    "version = EXCLUDED.version, position = EXCLUDED.position, last_event_id = EXCLUDED.last_event_id, "
    "event_time_watermark = EXCLUDED.event_time_watermark, lag_ms = EXCLUDED.lag_ms, "
    "projected_at = EXCLUDED.projected_at, row_kinds = EXCLUDED.row_kinds "
    "WHERE projection_tracking.version = CAST(:expected_version AS bigint) "
    "AND projection_tracking.position = CAST(:expected_position AS bigint) "
    "AND projection_tracking.upcaster_registry_digest = EXCLUDED.upcaster_registry_digest "
    "AND projection_tracking.reducer_version = EXCLUDED.reducer_version "
)
_TRACKING_IF_NONE_SUFFIX = "ON CONFLICT (tenant_id, organization_id, execution_id) DO NOTHING"
# The rows of kinds not kept, and the pages past the end of those kept (``pages``: kind -> page count).
_DELETE_OTHER_ROWS = (
    "DELETE FROM projection WHERE tenant_id = :t AND organization_id = :o AND execution_id = :e "
    "AND (NOT (projection_type = ANY(CAST(:keep AS text[]))) "
    "OR page >= COALESCE(CAST(CAST(:pages AS jsonb) ->> projection_type AS integer), 2147483647))"
)
_UPSERT = (
    "ON CONFLICT (tenant_id, organization_id, execution_id, projection_type, page) DO UPDATE SET "
    "version = EXCLUDED.version, state = EXCLUDED.state, checksum = EXCLUDED.checksum, "
    "upcaster_registry_digest = EXCLUDED.upcaster_registry_digest, reducer_version = EXCLUDED.reducer_version "
    "WHERE projection.version {newer} EXCLUDED.version "
    "OR projection.upcaster_registry_digest <> EXCLUDED.upcaster_registry_digest "
    "OR projection.reducer_version <> EXCLUDED.reducer_version"
)
_UPSERT_SUFFIX = _UPSERT.format(newer="<")
# A refold (under the lock) rewrites every page, also those at its own version: a page's rows move when
# the pages before it change size (a projection stored before pages, refolded because a row was missing).
_REFOLD_UPSERT_SUFFIX = _UPSERT.format(newer="<=")


def rows_consistent(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    tracking: Tracking,
) -> bool:
    """A row for every kind the tracking row lists and for no other, none ahead of the tracking row, all
    folded with its digest and version (read without the rows' state)."""
    rows = conn.execute(_HEADERS, scope_params(tenant_id, organization_id, execution_id)).all()
    return set(_pages_of(rows)) == tracking.row_kinds and _current(rows, tracking)


def _pages_of(rows: Iterable[Any]) -> dict[str, list[Any]]:
    """Rows (ordered by kind and page) by kind; a kind missing a page is left out, as missing."""
    kinds: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        kinds[r.projection_type].append(r)
    return {kind: pages for kind, pages in kinds.items() if [r.page for r in pages] == list(range(len(pages)))}


def _current(rows: Iterable[Any], tracking: Tracking) -> bool:
    """No row ahead of the tracking row, all folded with its digest and reducer version."""
    return all(
        int(r.version) <= tracking.version and tracking.folded_with(r.upcaster_registry_digest, r.reducer_version)
        for r in rows
    )


def load_state(
    conn: Connection,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    tracking: Tracking,
    kinds: Iterable[str],
) -> ReplayState | None:
    """The state with only the row kinds ``kinds`` loaded (the others left empty: the caller folds only
    events that do not touch them; a kind the tracking row lists no row for is the empty surface); None
    when a row it lists is missing or was folded otherwise."""
    wanted = sorted(set(kinds) & tracking.row_kinds)
    params = {**scope_params(tenant_id, organization_id, execution_id), "kinds": wanted}
    read = conn.execute(_SURFACES, params).all() if wanted else []
    pages = _pages_of(read)
    if set(pages) != set(wanted) or not _current(read, tracking):
        return None
    state = ReplayState.from_parts(
        {},
        [],
        event_count=tracking.version,
        last_event_id=tracking.last_event_id,
        last_position=tracking.position,
    )
    for kind, stored in pages.items():
        key = "uri" if kind == LINEAGE else "id"
        by_id = {str(row[key]): row for page in stored for row in page.state}
        rows = PagedRows(by_id, stored=[len(page.state) for page in stored])
        if kind == LINEAGE:
            state.payload_refs = rows
        else:
            state.surfaces[kind] = rows
    return state


def live_checksums(
    conn: Connection, tenant_id: str, organization_id: str, execution_id: str | int, tracking: Tracking | None
) -> dict[str, str]:
    """Each surface's live checksum (what ``verify`` compares with a fresh fold): its stored row's, or
    the empty surface's for a kind the tracking row lists no row for (none without a tracking row)."""
    rows = conn.execute(_CHECKSUMS, scope_params(tenant_id, organization_id, execution_id)).all()
    stored = {r.projection_type: r.checksum for r in rows if r.projection_type in SURFACES}
    if tracking is None:
        return stored
    empty = surface_checksum([])
    return {
        **{name: empty for name in SURFACES if name not in tracking.row_kinds},
        **{name: value for name, value in stored.items() if name in tracking.row_kinds},
    }


def save_projection(
    conn: Connection,
    state: ReplayState,
    *,
    tenant_id: str,
    organization_id: str,
    execution_id: str | int,
    registry_digest: str,
    reducer_version: int,
    watermark: datetime | None,
    lag_ms: int | None,
    projected_at: datetime,
    kinds: Iterable[str] = KINDS,
    stored: frozenset[str] | None = None,
    unless_changed: Tracking | Literal[False] | None = False,
) -> list[str] | None:
    """Upsert the row kinds ``kinds`` of the execution's projection (by default all) and its tracking
    row, in one statement; a row already at a higher version is kept (version-monotonic). The kinds
    written, in :data:`KINDS` order.

    A kind whose surface is empty gets no row unless it has one (``stored``: the kinds with a row
    before this fold, as its tracking row listed them). ``stored=None``: a fold from the first event;
    the rows of the kinds it does not write are deleted. The tracking row lists the kinds with a row.

    ``unless_changed``: the tracking row the fold started from, read without a lock (None: there was
    none). The rows are written only if the tracking row is still that one; None when it was not
    (nothing written: another fold committed meanwhile)."""
    key = {"tenant_id": tenant_id, "organization_id": organization_id, "execution_id": int(execution_id)}
    common = {
        **key,
        "version": state.event_count,
        "upcaster_registry_digest": as_bytea(registry_digest),
        "reducer_version": reducer_version,
    }
    before = stored or frozenset()
    wanted = set(kinds)
    written = [kind for kind in KINDS if kind in wanted and (_table(state, kind) or kind in before)]
    paged = {kind: _paged(state, kind) for kind in written}
    shrunk = any(rows.shrinks() for rows in paged.values())
    if shrunk and unless_changed is not False:
        return None  # pages to delete: a fold under the lock does it (reducers remove no row: a rare case)
    rows = []
    counts: dict[str, int] = {}
    for kind, table in paged.items():
        settled = table.settle()
        counts[kind] = settled.count
        rows += [
            {
                **common,
                "projection_type": kind,
                "page": page,
                "state": page_rows,
                "checksum": as_bytea(settled.checksum if page == settled.count - 1 else ""),
            }
            for page, page_rows in settled.pages.items()
        ]
    row_kinds = [kind for kind in KINDS if kind in before or kind in written]
    tracking = {
        **common,
        "position": state.last_position,
        "last_event_id": None if state.last_event_id is None else int(state.last_event_id),
        "event_time_watermark": watermark,
        "lag_ms": lag_ms,
        "projected_at": projected_at,
        "row_kinds": row_kinds,
    }
    batch = InsertBatch()  # the surface rows and the tracking row in one statement
    if unless_changed is False:
        if stored is None or shrunk:  # a refold: rows of kinds now empty (folded otherwise) go, and pages past the end
            scope = scope_params(tenant_id, organization_id, execution_id)
            batch.statement(_DELETE_OTHER_ROWS, {**scope, "keep": row_kinds, "pages": canonical_json(counts)})
        batch.insert(projection, rows, suffix=_REFOLD_UPSERT_SUFFIX if stored is None else _UPSERT_SUFFIX)
        batch.insert(projection_tracking, [tracking], suffix=_TRACKING_UPSERT_SUFFIX)
        batch.execute(conn)
        return written
    expected: dict[str, Any] = {}
    if unless_changed is None:
        suffix = _TRACKING_IF_NONE_SUFFIX
    else:
        suffix = _TRACKING_IF_UNCHANGED_SUFFIX
        expected = {"expected_version": unless_changed.version, "expected_position": unless_changed.position}
    tracked = batch.insert(projection_tracking, [tracking], suffix=suffix, returning=("execution_id",))
    batch.insert(projection, rows, suffix=_UPSERT_SUFFIX, only_with=(tracked, "execution_id"))
    batch.execute(conn, params=expected)
    return written if tracked.returned else None


def _table(state: ReplayState, kind: str) -> dict[str, Any]:
    return state.payload_refs if kind == LINEAGE else state.surfaces[kind]


def _paged(state: ReplayState, kind: str) -> PagedRows:
    """The rows of ``kind`` as pages (rows stored nowhere yet are written whole), kept in ``state``."""
    rows = _table(state, kind)
    if isinstance(rows, PagedRows):
        return rows
    paged = PagedRows(rows)
    if kind == LINEAGE:
        state.payload_refs = paged
    else:
        state.surfaces[kind] = paged
    return paged
