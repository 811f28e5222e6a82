"""``resolve_payloads``: verify the payload references an execution's events carry, without bodies.

Each reference is fetched through a :class:`PayloadFetcher` and its sha256 compared with the one the
event recorded. The answer is a bounded summary — counts, and the first problems by uri — never a
payload body. Without a fetcher configured every reference is ``unverifiable`` (reported, not hidden).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from noetl_cloud.envelope import sha256_hex

MAX_PROBLEMS = 20


class PayloadFetcher(Protocol):
    def fetch(self, uri: str) -> bytes | None:
        """The bytes stored at ``uri``; None when nothing is stored there. Raise ``LookupError`` for a
        uri this fetcher cannot resolve (another store, another scheme)."""
        ...


@dataclass
class MemoryPayloads:
    """Payload bytes by uri (tests and the embedded local mode)."""

    objects: dict[str, bytes] = field(default_factory=dict)

    def put(self, uri: str, data: bytes) -> str:
        self.objects[uri] = data
        return sha256_hex(data)

    def fetch(self, uri: str) -> bytes | None:
        return self.objects.get(uri)


def summarize(references: Iterable[dict[str, Any]], fetcher: PayloadFetcher | None) -> dict[str, Any]:
    """Counts of ``ok``, ``missing``, ``mismatched`` and ``unverifiable`` references and the first
    :data:`MAX_PROBLEMS` problems (uri and kind)."""
    counts = {"checked": 0, "ok": 0, "missing": 0, "mismatched": 0, "unverifiable": 0}
    problems: list[dict[str, str]] = []
    for ref in references:
        counts["checked"] += 1
        verdict = _verdict(ref, fetcher)
        counts[verdict] += 1
        if verdict != "ok" and len(problems) < MAX_PROBLEMS:
            problems.append({"uri": str(ref["uri"]), "problem": verdict})
    return {**counts, "problems": problems, "truncated": counts["checked"] - counts["ok"] > len(problems)}


def _verdict(ref: dict[str, Any], fetcher: PayloadFetcher | None) -> str:
    if fetcher is None or not ref.get("sha256"):
        return "unverifiable"
    try:
        data = fetcher.fetch(str(ref["uri"]))
    except LookupError:
        return "unverifiable"
    if data is None:
        return "missing"
    return "ok" if sha256_hex(data) == ref["sha256"] else "mismatched"
