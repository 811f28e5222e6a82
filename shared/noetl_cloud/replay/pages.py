"""A projection surface stored as pages, its checksum kept up to date from what a fold changed.

A surface's rows, sorted by id (the order its checksum is taken over), are stored as pages of
:data:`PAGE_ROWS` rows: page ``p`` holds rows ``p * PAGE_ROWS`` to ``(p + 1) * PAGE_ROWS - 1``
(``projection.page``). A fold writes only the pages holding rows it changed, all pages from the first
row it added or removed (their rows moved), and always the last page, whose row carries the surface's
checksum. The checksum is the one :func:`~noetl_cloud.replay.state.surface_checksum` takes (sha256 of the
canonical JSON of the sorted rows), computed from the sha256 state saved at the start of each page:
a fold hashes again from the first page it changed. In a long loop, whose new commands sort last, a
fold writes and hashes one or two pages however many commands the execution has run (issue #26:
before, it wrote and hashed the whole surface, 3.5 MB of JSON at 10,000 iterations).

:class:`PagedRows` knows what changed because a reducer changes a row only through the mapping: it
gets the row (``get``, ``[]``) and changes it in place, or sets it. Every id handed out or set since
the last :meth:`~PagedRows.settle` counts as changed; a wholesale access (``values``, ``items``,
``update``...) counts as a change of every row.
"""

from __future__ import annotations

import hashlib
from _collections_abc import dict_items, dict_values
from bisect import bisect_left, insort
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl_cloud.envelope import canonical_json

Row = dict[str, Any]

#: Rows per stored page: a fold at the tip of a long loop writes one or two pages of this size.
PAGE_ROWS = 64


def page_count(rows: int) -> int:
    """Pages of a written surface: at least one (an empty surface that has a row keeps page 0, ``[]``)."""
    return max(1, -(-rows // PAGE_ROWS))


@dataclass(frozen=True)
class Settled:
    """What a fold left: the surface's checksum, the pages to write and how many pages it has now."""

    checksum: str
    pages: dict[int, list[Row]]
    count: int


class PagedRows(dict[str, Row]):
    """A surface's rows by id that record which rows a fold may have changed (see the module)."""

    def __init__(self, rows: Mapping[str, Row] | None = None, *, stored: list[int] | None = None) -> None:
        """``stored``: the row count of each stored page, in page order, when ``rows`` were read from
        them; None for rows stored nowhere yet (written whole by the first :meth:`settle`)."""
        super().__init__(rows or {})
        self.touched: set[str] = set()
        self.stored_pages = 0 if stored is None else len(stored)
        # Read in another layout (a row per surface, before pages): written whole once.
        self.everything = stored is None or stored != _layout(len(self))
        self._keys = sorted(super().keys())
        self._texts: dict[str, bytes] = {}  # canonical JSON of rows hashed since they last changed
        self._marks: list[Any] = []  # sha256 state before each page's first row, for the pages hashed

    # -- rows handed out or set: changed, as far as this mapping knows ----------------------------------

    def __getitem__(self, key: str) -> Row:
        self.touched.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.touched.add(key)
        return super().get(key, default)

    def __setitem__(self, key: str, value: Row) -> None:
        self.touched.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.touched.add(key)
        super().__delitem__(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.touched.add(key)
        return super().setdefault(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self.touched.add(key)
        return super().pop(key, *default)

    # -- wholesale access: every row may have changed -----------------------------------------------------

    def values(self) -> dict_values[str, Row]:
        self.everything = True
        return super().values()

    def items(self) -> dict_items[str, Row]:
        self.everything = True
        return super().items()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.everything = True
        super().update(*args, **kwargs)

    def popitem(self) -> tuple[str, Row]:
        self.everything = True
        return super().popitem()

    def clear(self) -> None:
        self.everything = True
        super().clear()

    # -- settling a fold -----------------------------------------------------------------------------------

    def shrinks(self) -> bool:
        """Fewer pages than are stored: the rows of the pages past the end must be deleted."""
        return page_count(len(self)) < self.stored_pages

    def settle(self) -> Settled:
        """The checksum of the rows now and the pages a fold must write; afterwards every row counts as
        stored (as written by the caller)."""
        if self.everything:
            self._keys = sorted(super().keys())
            self._texts.clear()
            dirty, first = set(range(page_count(len(self._keys)))), 0
        else:
            dirty, first = self._changed()
        count = page_count(len(self._keys))
        if dirty or count != self.stored_pages:
            dirty.add(count - 1)  # the last page carries the checksum
            first = min(first, (count - 1) * PAGE_ROWS)
        checksum = self._hash_from(first)
        rows = self._keys
        pages = {
            p: [dict.__getitem__(self, key) for key in rows[p * PAGE_ROWS : (p + 1) * PAGE_ROWS]]
            for p in sorted(dirty)
            if p < count
        }
        self.touched.clear()
        self.everything = False
        self.stored_pages = count
        return Settled(checksum, pages, count)

    def _changed(self) -> tuple[set[int], int]:
        """The pages holding changed rows (every page from the first row added or removed) and the index
        of the first changed row (``len`` when none changed)."""
        keys, moved = self._keys, len(self._keys)
        # Membership by key (``in``: no row handed out), not a set of every key: a fold's cost stays the
        # rows it touched, not the surface's size.
        present = [key for key in self.touched if key in self]
        for key in self.touched.difference(present):  # removed (or only asked for)
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                del keys[i]
                self._texts.pop(key, None)
                moved = min(moved, i)
        changed: list[int] = []
        for key in present:
            self._texts.pop(key, None)
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                changed.append(i)
            else:
                insort(keys, key)
                moved = min(moved, i)
        # An insertion moves the rows after it: indexes found before it moved are one short past it.
        changed = [i for i in changed if i < moved]
        dirty = {i // PAGE_ROWS for i in changed}
        if moved < len(keys):
            dirty |= set(range(moved // PAGE_ROWS, page_count(len(keys))))
        first = min([moved, *changed])
        return dirty, first

    def _hash_from(self, first: int) -> str:
        """sha256 of the canonical JSON of the sorted rows, hashing again from the page of row ``first``."""
        keys = self._keys
        page = min(first // PAGE_ROWS, max(len(self._marks) - 1, 0))
        if not self._marks:
            self._marks.append(hashlib.sha256(b"["))
        del self._marks[page + 1 :]
        state = self._marks[page].copy()
        for i in range(page * PAGE_ROWS, len(keys)):
            if i % PAGE_ROWS == 0 and i // PAGE_ROWS == len(self._marks):
                self._marks.append(state.copy())
            text = self._texts.get(keys[i])
            if text is None:
                text = self._texts[keys[i]] = canonical_json(dict.__getitem__(self, keys[i])).encode()
            state.update(b"," + text if i else text)
        state.update(b"]")
        return str(state.hexdigest())


def _layout(rows: int) -> list[int]:
    """The row count of each page of a surface of ``rows`` rows, as :class:`PagedRows` stores it."""
    return [min(PAGE_ROWS, rows - p * PAGE_ROWS) for p in range(page_count(rows))]
