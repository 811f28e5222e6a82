"""A distributed loop's row, loaded for one report at a cost that does not grow with the loop.

A report of one iteration needs the loop's counters, the element of the next iteration it issues and,
only when the loop ends, the results of all its iterations. So :func:`load_loop` reads the counters and
that one element (``items -> next_index``), never the whole collection, and the results are not kept on
the loop's row at all: each iteration's result is on its command's row (written when the command ends),
and :class:`LoopResults` reads them once, when the loop ends. Before, every report read the whole
``items`` array and read and rewrote the whole ``results`` object: the 10,000th iteration of a loop cost
half as much again as the first (issue #26).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sqlalchemy import Connection, text

_LOOP = text(
    "SELECT step_run_id, execution_id, step, args, mode, max_in_flight, next_index, in_flight, ctx_owners, "
    "failed_index, error, jsonb_array_length(items) AS item_count, items -> next_index AS next_item "
    "FROM loop_run WHERE step_run_id = :id"
)
_ITEM = text("SELECT items -> :index FROM loop_run WHERE step_run_id = :id")
# What a loop keeps of its finished iterations (Turn.iteration_ended): a sequential loop the
# successful ones (the first failure stops it), a parallel loop every finished one. One command row
# per iteration: the reaper's re-issue moves the same row to its next attempt.
_RESULTS = text(
    "SELECT iteration, result FROM command WHERE execution_id = :execution AND step_run_id = :id "
    "AND kind = 'iteration' "
    "AND status = ANY(CAST(:statuses AS text[]))"
)
KEPT_STATUSES = {"sequential": ["completed"], "parallel": ["completed", "failed"]}


class LoopItems:
    """The loop's collection as the turn reads it: its length, and an element fetched when asked for
    (the next one comes with the loop's row)."""

    def __init__(self, count: int, known: Mapping[int, Any], fetch: Callable[[int], Any]) -> None:
        self._count = count
        self._known = dict(known)
        self._fetch = fetch

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self._count:
            raise IndexError(index)
        if index not in self._known:
            self._known[index] = self._fetch(index)
        return self._known[index]


class LoopResults:
    """The results a loop keeps, by iteration (``str(index)``): those this turn recorded, over those
    stored on the rows of its ended commands, which are read only if the loop ends in this turn."""

    def __init__(self, load: Callable[[], dict[str, Any]]) -> None:
        self._load = load
        self._recorded: dict[str, Any] = {}
        self._all: dict[str, Any] | None = None

    def __setitem__(self, key: str, value: Any) -> None:
        self._recorded[key] = value
        if self._all is not None:
            self._all[key] = value

    def _everything(self) -> dict[str, Any]:
        if self._all is None:
            self._all = {**self._load(), **self._recorded}
        return self._all

    def __getitem__(self, key: str) -> Any:
        return self._everything()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._everything())

    def __len__(self) -> int:
        return len(self._everything())


def load_loop(conn: Connection, step_run_id: int) -> dict[str, Any]:
    """The loop's row as the turn folds it (``items`` a :class:`LoopItems`, ``results`` a
    :class:`LoopResults`); two small statements at most, whatever the loop's length."""
    row = conn.execute(_LOOP, {"id": step_run_id}).one()
    loop = dict(row._mapping)
    count, index = loop.pop("item_count"), loop["next_index"]
    known = {index: loop.pop("next_item")} if index < count else {}
    loop.pop("next_item", None)
    loop["items"] = LoopItems(count, known, lambda i: conn.execute(_ITEM, {"index": i, "id": step_run_id}).scalar_one())
    statuses, execution_id = KEPT_STATUSES[loop["mode"]], loop["execution_id"]
    loop["results"] = LoopResults(
        lambda: {
            str(r.iteration): r.result
            for r in conn.execute(_RESULTS, {"execution": execution_id, "id": step_run_id, "statuses": statuses})
        }
    )
    return loop
