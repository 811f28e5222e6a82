"""Bounded previews of the payloads an execution's events refer to (the console's execution page).

``GET /api/executions/{id}/payloads/{sha256}?rows=&bytes=`` finds the reference among the execution's
events (the envelope's ``payload_ref``, or a reference inside the payload: a frame's ``output_ref``, an
offloaded result's ``reference``; one statement, the event scoped to the tenant and the execution), so a
caller previews only what the execution points at, and reads it from the deployment's payload store:

* an Arrow IPC stream (``application/vnd.apache.arrow.stream``, a cursor loop's frame rows) of at most
  :data:`MAX_ARROW_BYTES` is read whole (its digest checked) and its first ``rows`` rows (default 20, at
  most 200) decoded with pyarrow, batch by batch, into ``columns`` and ``rows``, each cell as JSON text
  cut at :data:`MAX_CELL` characters; ``row_count`` is the frame's;
* JSON and text: the first ``bytes`` bytes (default 4096, at most 65536) as UTF-8 text (``truncated``
  when there is more; a cut read is not digest-checked: ``verified`` says so);
* anything else: its size and first 64 bytes in hex.

Errors: 404 ``payload_not_referenced`` (no event of the execution refers to it), ``execution_not_found``,
``payload_not_found``; 400 ``invalid_digest`` / ``invalid_preview_bound``; 413 ``preview_too_large`` (an
Arrow payload over the cap); 503 ``payload_store_not_configured``; a payload that does not decode is 422
``payload_undecodable``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from flask import Blueprint, request
from pydantic import ValidationError
from sqlalchemy import Engine, text

from noetl_cloud.errors import BadRequest, NotFound, PayloadTooLarge, Unavailable, ValidationFailed
from noetl_cloud.payload.arrow import ARROW_STREAM, ENCODING_KEY, JSON_ROWS
from noetl_cloud.payload.port import ObjectPayloadStore, PayloadReference

DEFAULT_ROWS, MAX_ROWS = 20, 200
DEFAULT_BYTES, MAX_BYTES = 4096, 65536
MAX_ARROW_BYTES = 32 * 1024 * 1024
MAX_CELL = 200
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_TEXTUAL = re.compile(r"^(text/[\w.+-]+|application/([\w.-]+\+)?json|application/(x-)?ndjson|application/x-yaml)$")

_FIND = text(
    "SELECT x.found, e.payload_ref, e.payload FROM (SELECT 1 AS found FROM execution "
    " WHERE execution_id = :id AND tenant_id = :t AND organization_id = :o) x "
    "LEFT JOIN LATERAL (SELECT payload_ref, payload FROM event WHERE execution_id = :id "
    " AND tenant_id = :t AND organization_id = :o "
    " AND (payload_ref ->> 'sha256' = :sha OR strpos(payload::text, :sha) > 0) ORDER BY position LIMIT 1) e ON true"
)


class PayloadStoreNotConfigured(Unavailable):
    code = "payload_store_not_configured"


class PreviewTooLarge(PayloadTooLarge):
    code = "preview_too_large"


class PayloadUndecodable(ValidationFailed):
    code = "payload_undecodable"


def _references(value: Any, digest: str) -> Iterator[dict[str, Any]]:
    """Every reference-shaped object (``uri``, ``sha256``, ``media_type``) with ``digest`` inside ``value``."""
    if isinstance(value, dict):
        if value.get("sha256") == digest and isinstance(value.get("uri"), str) and "media_type" in value:
            yield value
        for item in value.values():
            yield from _references(item, digest)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item, digest)


def _bound(name: str, default: int, high: int) -> int:
    value = request.args.get(name, "")
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= high:
        raise BadRequest(
            f"{name} must be an integer from 1 to {high}", code="invalid_preview_bound", details={"parameter": name}
        )
    return int(value)


def _cell(value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    return shown if len(shown) <= MAX_CELL else shown[: MAX_CELL - 1] + "…"


def arrow_preview(data: bytes, rows: int) -> dict[str, Any]:
    """The first ``rows`` rows of an Arrow IPC stream: column names and cells as text."""
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(data))
        json_rows = (reader.schema.metadata or {}).get(ENCODING_KEY) == JSON_ROWS
        picked: list[dict[str, Any]] = []
        for batch in reader:
            for row in batch.slice(0, rows - len(picked)).to_pylist():
                picked.append(json.loads(row["row"]) if json_rows else row)
            if len(picked) >= rows:
                break
        columns = (
            [f.name for f in reader.schema] if not json_rows else list(dict.fromkeys(k for r in picked for k in r))
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, KeyError):
        raise PayloadUndecodable("the payload is not an Arrow IPC stream this preview reads") from None
    return {
        "kind": "table",
        "columns": columns,
        "rows": [[_cell(r.get(c)) for c in columns] for r in picked],
    }


class PayloadPreviews:
    """Finds an execution's payload references and reads bounded previews of them."""

    def __init__(self, engine: Engine, tenant: tuple[str, str], store: ObjectPayloadStore | None) -> None:
        self.engine = engine
        self.tenant = tenant
        self.store = store

    def reference(self, execution_id: int, digest: str) -> PayloadReference:
        if not _DIGEST.match(digest):
            raise BadRequest("a payload is named by its sha256 (64 hex digits)", code="invalid_digest")
        tenant, org = self.tenant
        with self.engine.connect() as conn:
            row = conn.execute(_FIND, {"id": execution_id, "t": tenant, "o": org, "sha": digest}).first()
        if row is None:
            raise NotFound(f"no execution {execution_id}", code="execution_not_found")
        found = [r for r in _references({"ref": row.payload_ref, "payload": row.payload}, digest)]
        if not found:
            raise NotFound(
                f"no event of execution {execution_id} refers to payload {digest}",
                code="payload_not_referenced",
                details={"sha256": digest},
            )
        first = found[0]
        try:
            return PayloadReference(
                uri=first["uri"],
                sha256=digest,
                media_type=str(first["media_type"]),
                size_bytes=first.get("size_bytes") or 0,  # unknown: the reads below are bounded anyway
            )
        except ValidationError:
            raise PayloadUndecodable("the event's payload reference is malformed") from None

    def preview(self, execution_id: int, digest: str, *, rows: int, max_bytes: int) -> dict[str, Any]:
        ref = self.reference(execution_id, digest)
        if self.store is None:
            raise PayloadStoreNotConfigured("this deployment has no payload store (NOETL_PAYLOAD_BACKEND)")
        # An event's reference may omit the size (0 here): a whole read knows it, a cut one does not.
        size = ref.size_bytes or None
        base = {"sha256": ref.sha256, "uri": ref.uri, "media_type": ref.media_type, "size_bytes": size}
        media = ref.media_type.split(";")[0].strip().lower()
        if media == ARROW_STREAM:
            if ref.size_bytes > MAX_ARROW_BYTES:
                raise PreviewTooLarge(
                    f"an Arrow payload over {MAX_ARROW_BYTES} bytes is not previewed",
                    details={"size_bytes": ref.size_bytes, "max_bytes": MAX_ARROW_BYTES},
                )
            data, complete = self._head(ref, MAX_ARROW_BYTES)
            if not complete:
                raise PreviewTooLarge(
                    f"an Arrow payload over {MAX_ARROW_BYTES} bytes is not previewed",
                    details={"max_bytes": MAX_ARROW_BYTES},
                )
            return {**base, "size_bytes": len(data), **arrow_preview(data, rows), "verified": True}
        head, complete = self._head(ref, max_bytes if _TEXTUAL.match(media) else 64)
        if complete:
            base["size_bytes"] = len(head)
        if _TEXTUAL.match(media):
            return {
                **base,
                "kind": "text",
                "text": head.decode("utf-8", errors="replace"),
                "truncated": not complete,
                "verified": complete,
            }
        return {**base, "kind": "binary", "head_hex": head.hex(), "truncated": not complete, "verified": complete}

    def _head(self, ref: PayloadReference, limit: int) -> tuple[bytes, bool]:
        """The first ``limit`` bytes, and whether they are all of it (then the digest was checked)."""
        assert self.store is not None
        taken = bytearray()
        chunks = self.store.open(ref, chunk_bytes=min(max(limit, 4096), 1024 * 1024))
        for chunk in chunks:
            taken += chunk
            if len(taken) > limit:  # the rest is never read
                return bytes(taken[:limit]), False
        return bytes(taken), True


def blueprint(service: Callable[[], PayloadPreviews]) -> Blueprint:
    bp = Blueprint("payload_previews", __name__)

    @bp.get("/api/executions/<int:execution_id>/payloads/<digest>")
    def preview_payload(execution_id: int, digest: str) -> dict[str, Any]:
        rows = _bound("rows", DEFAULT_ROWS, MAX_ROWS)
        max_bytes = _bound("bytes", DEFAULT_BYTES, MAX_BYTES)
        return service().preview(execution_id, digest, rows=rows, max_bytes=max_bytes)

    return bp
