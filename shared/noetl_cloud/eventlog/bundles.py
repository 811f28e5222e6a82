"""Mirror bundles: the mirror rows a settle publishes to one topic, as one message per ``limit`` rows.

After the settle's coalescing (``eventlog/relay.py``) a settle holds one mirror row per execution it
saw written. Published one message each, the projector gets them one push at a time: the Pub/Sub
emulator pushes at most two messages at once, and each push pays an HTTP round trip. Bundled, one
message names up to ``limit`` executions, which the projector folds side by side, and the events topic
carries one message per settle instead of one per execution (Pub/Sub bills every message at least
1 kB).

A bundle's data is ``{"deliveries": [<row data>, ...]}``, each entry a row's own data (``event_id``,
``execution_id``, ``events``) plus, with tracing on, its ``trace`` (the row's ``traceparent``,
``tracestate`` and ``baggage`` attributes), so each fold still joins the trace of the request that
wrote its events. The bundle has no ordering key: the projector folds each execution up to its tip
whatever event a delivery names, so order between deliveries never changes a projection. Its outbox
id is its first row's, and the other rows are *covered* by it: deleted when it is published, kept
pending (for the sweep, which publishes rows one by one) when it is not. A row alone on its topic is
published as it is.

Pure: rows in, rows out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

BUNDLE_MAX = 100
TRACE_KEYS = ("traceparent", "tracestate", "baggage")


class MirrorRow(Protocol):
    @property
    def outbox_id(self) -> int: ...
    @property
    def topic(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def attributes(self) -> dict[str, str]: ...


Row = TypeVar("Row", bound=MirrorRow)


def bundled(rows: Sequence[Row], covered: dict[int, list[int]], limit: int = BUNDLE_MAX) -> list[Row]:
    """``rows`` (dataclass instances) as bundles of at most ``limit`` per topic, in outbox order;
    ``covered`` (published id -> ids deleted with it) is updated in place for the rows a bundle absorbs."""
    by_topic: dict[str, list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.outbox_id):
        by_topic.setdefault(row.topic, []).append(row)
    out: list[Row] = []
    for group in by_topic.values():
        for start in range(0, len(group), limit):
            chunk = group[start : start + limit]
            if len(chunk) == 1:
                out.append(chunk[0])
                continue
            head = chunk[0]
            absorbed = covered.setdefault(head.outbox_id, [])
            for row in chunk[1:]:
                absorbed.append(row.outbox_id)
                absorbed.extend(covered.pop(row.outbox_id, ()))
            data = {"deliveries": [delivery(row) for row in chunk]}
            out.append(
                dataclasses.replace(  # type: ignore[type-var]
                    head, data=data, attributes={"deliveries": str(len(chunk))}, ordering_key=None
                )
            )
    return out


def delivery(row: MirrorRow) -> dict[str, Any]:
    """One entry of a bundle: the row's data, with its trace context when it has one."""
    trace = {k: row.attributes[k] for k in TRACE_KEYS if k in row.attributes}
    return {**row.data, "trace": trace} if trace else dict(row.data)
