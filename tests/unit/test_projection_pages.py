"""Surfaces stored in pages (replay/pages.py): the checksum kept from what changed equals the whole
surface's, the pages written rebuild the surface, and a long loop's fold writes a bounded number."""

from __future__ import annotations

import random
from typing import Any

from noetl_cloud.replay.pages import PAGE_ROWS, PagedRows, page_count
from noetl_cloud.replay.state import surface_checksum


class Store:
    """What the projection table holds of one surface: pages written, pages past the end deleted."""

    def __init__(self) -> None:
        self.pages: dict[int, list[dict[str, Any]]] = {}

    def write(self, rows: PagedRows) -> tuple[str, set[int]]:
        shrinks = rows.shrinks()
        settled = rows.settle()
        self.pages.update({p: [dict(r) for r in page] for p, page in settled.pages.items()})
        if shrinks:
            self.pages = {p: page for p, page in self.pages.items() if p < settled.count}
        assert set(self.pages) == set(range(settled.count))
        return settled.checksum, set(settled.pages)

    def rows(self) -> list[dict[str, Any]]:
        return [row for p in sorted(self.pages) for row in self.pages[p]]

    def load(self) -> PagedRows:
        stored = [self.pages[p] for p in sorted(self.pages)]
        return PagedRows({r["id"]: dict(r) for page in stored for r in page}, stored=[len(page) for page in stored])


def expected(rows: PagedRows) -> list[dict[str, Any]]:
    return [dict.__getitem__(rows, key) for key in sorted(rows)]


def test_random_changes_keep_the_checksum_and_the_stored_pages_equal_to_the_whole_surface() -> None:
    rng = random.Random(26)
    store = Store()
    rows = PagedRows()
    for step in range(400):
        for _ in range(rng.randint(1, 6)):
            op = rng.random()
            key = f"{rng.randint(0, 600):05d}"
            if op < 0.5:
                rows[key] = {"id": key, "n": 0}
            elif op < 0.85:
                row = rows.get(key)
                if row is not None:
                    row["n"] += 1
            elif key in rows:
                del rows[key]
        checksum, _written = store.write(rows)
        assert checksum == surface_checksum(expected(rows)), step
        assert store.rows() == expected(rows), step
        if step % 50 == 49:  # a cache miss: the next fold starts from what is stored
            rows = store.load()


def test_a_long_loop_writes_one_or_two_pages_per_fold_however_long_it_ran() -> None:
    store = Store()
    rows = PagedRows()
    written_late: list[tuple[int, set[int]]] = []
    for i in range(3000):
        key = f"{10**17 + i}"  # command ids grow: a new command sorts last
        rows[key] = {"id": key, "status": "issued"}
        rows[key]["status"] = "completed"
        _checksum, written = store.write(rows)
        if i >= 2900:
            written_late.append((i + 1, written))
    assert all(len(pages) <= 2 for _n, pages in written_late)
    assert all(max(pages) == page_count(n) - 1 for n, pages in written_late)  # the last page, and the one before
    assert store.rows() == expected(rows)


def test_reading_a_row_without_handing_it_out_changes_nothing() -> None:
    store = Store()
    rows = PagedRows({f"{i:04d}": {"id": f"{i:04d}"} for i in range(3 * PAGE_ROWS)})
    store.write(rows)
    assert "0001" in rows and len(rows) == 3 * PAGE_ROWS and sorted(rows)[0] == "0000"
    _checksum, written = store.write(rows)
    assert written == set()
    rows.get("0001")  # handed out: it may have been changed in place
    _checksum, written = store.write(rows)
    assert written == {0, 2}  # its page, and the last, which carries the checksum


def test_a_surface_stored_in_one_row_before_pages_is_rewritten_in_pages() -> None:
    legacy = [{"id": f"{i:04d}"} for i in range(150)]
    rows = PagedRows({r["id"]: r for r in legacy}, stored=[150])
    settled = rows.settle()
    assert sorted(settled.pages) == [0, 1, 2] and settled.count == 3
    assert [len(page) for page in settled.pages.values()] == [PAGE_ROWS, PAGE_ROWS, 150 - 2 * PAGE_ROWS]
    assert settled.checksum == surface_checksum(legacy)


def test_an_empty_surface_is_one_empty_page() -> None:
    settled = PagedRows().settle()
    assert settled.pages == {0: []} and settled.count == 1
    assert settled.checksum == surface_checksum([])


def test_wholesale_access_rewrites_every_page() -> None:
    rows = PagedRows({f"{i:04d}": {"id": f"{i:04d}", "n": 0} for i in range(2 * PAGE_ROWS)}, stored=[PAGE_ROWS] * 2)
    for row in rows.values():
        row["n"] = 1
    settled = rows.settle()
    assert sorted(settled.pages) == [0, 1]
    assert settled.checksum == surface_checksum(expected(rows))
