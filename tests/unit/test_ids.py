from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from noetl_cloud.ids import EPOCH_MS, MAX_SEQUENCE, SnowflakeGenerator, parse


def test_one_million_ids_from_four_threads_are_unique() -> None:
    generator = SnowflakeGenerator(node_id=3)
    per_thread = 250_000
    results: list[list[int]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        next_id = generator.next_id
        results[slot] = [next_id() for _ in range(per_thread)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for chunk in results for i in chunk]
    assert len(ids) == 1_000_000
    assert len(set(ids)) == 1_000_000
    assert all(chunk == sorted(chunk) for chunk in results)  # monotonic as each thread saw them
    assert all(0 < i < 1 << 63 for i in (min(ids), max(ids)))


def test_generators_with_different_nodes_never_collide_in_the_same_millisecond() -> None:
    now = EPOCH_MS + 1_000
    a = SnowflakeGenerator(node_id=1, clock=lambda: now)
    b = SnowflakeGenerator(node_id=2, clock=lambda: now)
    assert not {a.next_id() for _ in range(5000)} & {b.next_id() for _ in range(5000)}


def test_ids_stay_increasing_when_the_clock_steps_back() -> None:
    times = iter([EPOCH_MS + 5000, EPOCH_MS + 5000, EPOCH_MS + 4000, EPOCH_MS + 4000, EPOCH_MS + 6000])
    gen = SnowflakeGenerator(node_id=0, clock=lambda: next(times))
    ids = [gen.next_id() for _ in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5


def test_sequence_overflow_borrows_the_next_millisecond_instead_of_repeating() -> None:
    gen = SnowflakeGenerator(node_id=9, clock=lambda: EPOCH_MS + 10)
    ids = [gen.next_id() for _ in range(MAX_SEQUENCE + 3)]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    when, node, seq = parse(ids[-1])
    assert node == 9 and seq == 1 and when == datetime.fromtimestamp((EPOCH_MS + 11) / 1000, tz=UTC)


def test_parse_round_trips_the_fields() -> None:
    gen = SnowflakeGenerator(node_id=1023, clock=lambda: EPOCH_MS + 123_456)
    when, node, seq = parse(gen.next_str())
    assert (node, seq) == (1023, 0)
    assert when == datetime.fromtimestamp((EPOCH_MS + 123_456) / 1000, tz=UTC)


def test_invalid_node_ids_are_refused() -> None:
    for bad in (-1, 1024):
        with pytest.raises(ValueError):
            SnowflakeGenerator(node_id=bad)
    with pytest.raises(ValueError):
        parse(-5)


def test_derived_node_id_is_in_range() -> None:
    assert all(0 <= SnowflakeGenerator().node_id <= 1023 for _ in range(50))
