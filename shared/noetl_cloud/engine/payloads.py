"""References first (data-plane architecture §2, dsl-v2-spec §10): large results leave the event log.

A result whose canonical JSON exceeds the threshold (256 KiB by default) is put in a :class:`PayloadStore`;
the event then carries ``{status, reference, context}`` instead of the value. The in-process runner keeps the
value itself for templates, so playbooks do not change.

``context`` is a small summary that keeps the event small: ``{count}`` for a list, and for a mapping its scalar
values that are short (numbers, booleans, null, strings up to :data:`CONTEXT_MAX_STRING` bytes), at most
:data:`CONTEXT_MAX_KEYS` of them. A large string is exactly what the reference is for, so it stays out.
"""

from __future__ import annotations

from typing import Any, Protocol

from noetl_cloud.envelope import canonical_json, sha256_hex

DEFAULT_THRESHOLD = 256 * 1024

#: The longest string (UTF-8 bytes) a reference's ``context`` copies from a mapping result.
CONTEXT_MAX_STRING = 256

#: The most keys a reference's ``context`` copies from a mapping result.
CONTEXT_MAX_KEYS = 32


class PayloadStore(Protocol):
    """Stores result payloads and resolves references to them."""

    def put(self, execution_id: str, name: str, data: Any) -> dict[str, Any]:
        """Store ``data``; return its reference ``{kind, ref, store, size, checksum}``."""
        ...

    def resolve(self, reference: dict[str, Any]) -> Any:
        """The data a reference points at; :class:`KeyError` if unknown."""
        ...


class MemoryPayloadStore:
    """A payload store in a dict; the ``noetl://`` references are local to this instance."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}

    def put(self, execution_id: str, name: str, data: Any) -> dict[str, Any]:
        """Store ``data`` under ``noetl://execution/<id>/<name>``."""
        text = canonical_json(data)
        ref = f"noetl://execution/{execution_id}/{name}"
        self.items[ref] = data
        return {
            "kind": "temp_ref",
            "ref": ref,
            "store": "memory",
            "size": len(text.encode()),
            "checksum": sha256_hex(text),
        }

    def resolve(self, reference: dict[str, Any]) -> Any:
        """The stored data."""
        return self.items[reference["ref"]]


def _context(value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        return {"count": len(value)}
    if not isinstance(value, dict):
        return {}
    context: dict[str, Any] = {}
    for key, item in value.items():
        if len(context) >= CONTEXT_MAX_KEYS:
            break
        if _small_scalar(item):
            context[key] = item
    return context


def _small_scalar(item: Any) -> bool:
    if isinstance(item, str):
        return len(item) <= CONTEXT_MAX_STRING and len(item.encode()) <= CONTEXT_MAX_STRING
    return item is None or isinstance(item, int | float | bool)


def compact(
    status: str, value: Any, *, store: PayloadStore | None, execution_id: str, name: str, threshold: int
) -> dict[str, Any]:
    """What an event carries for a result: ``{status, result}`` inline, or ``{status, reference, context}``."""
    size = len(canonical_json(value).encode())
    if store is None or size <= threshold:
        return {"status": status, "result": value}
    reference = store.put(execution_id, name, value)
    return {"status": status, "reference": reference, "context": _context(value)}
