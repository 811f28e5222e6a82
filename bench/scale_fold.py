"""Step 3 of bench/scale.py: does the projector fold as fast as a burst writes events?

Two bursts of the same size. The first with the projector pushed to as in service (it keeps pace or
falls behind); the second with its push subscription paused while the burst writes, then resumed: its
figure is the projector's rate when the whole burst is behind it, from the resume to the last event
folded, against that burst's write rate (``ratio projector_fold_to_write``). Folding beside the
writes, a projector can fold no faster than events arrive, so the first burst's ratio reads about 1.0
whenever it keeps pace (its folding span is the writing span shifted by its lag) and cannot show by how
much it is faster; the second can. The first burst's figures (its ratio and how long after the last
write the projection was current) are printed too.

The first burst, in detail:

While the burst runs, a sampler reads every 0.1 s how many of the burst's events are written and how
many the projector has folded (the sum of its tracking rows' versions over the burst's executions),
until every one is folded. Each side's rate is the burst's events over its own active span: writing
from the first event written to the last, folding from the first event folded to the last. Their
ratio compares throughput; the delay between the two (the relay's publish, the emulator's push) is
printed apart, as the time the projection was current after the last write. A projector that starts
late (still folding an earlier backlog) folds the burst's events in bigger batches over a shorter
span: its rate is then its rate when behind, higher than at the tip. (Before, folded events
were counted over the writing window alone, so a projector exactly as fast as the writes, one second
behind them, scored 1 - 1/window: the delay read as a deficit.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from noetl_cloud.envelope import utc_now
from noetl_cloud.retention.partitions import first_id
from scale_db import scalar

_WRITTEN = "SELECT count(*) FROM event WHERE execution_id >= :lo"
_FOLDED = (
    "SELECT coalesce(sum(version), 0) FROM projection_tracking "
    "WHERE tenant_id = :t AND organization_id = :o AND execution_id >= :lo"
)


@dataclass
class Sampler:
    """(time, written, folded) of the executions from ``lowest`` on, every ``every`` seconds."""

    engine: Engine
    lowest: int
    scope: tuple[str, str]
    every: float = 0.1
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    writes_ended = False

    def run(self, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            now = time.perf_counter()
            written = int(scalar(self.engine, _WRITTEN, lo=self.lowest))
            folded = int(
                scalar(self.engine, _FOLDED, t=self.scope[0], o=self.scope[1], lo=self.lowest),
            )
            self.samples.append((now, written, folded))
            if self.writes_ended and written and folded >= written:
                return
            time.sleep(max(0.0, self.every - (time.perf_counter() - now)))

    def span(self, column: int, total: int) -> tuple[float, float]:
        """When the count in ``column`` first rose above zero and first reached ``total`` (each the midpoint
        between the sample before and the sample at which it did)."""
        return self._when(column, lambda n: n > 0), self._when(column, lambda n: n >= total)

    def _when(self, column: int, reached: Callable[[int], bool]) -> float:
        for before, sample in zip(self.samples, self.samples[1:], strict=False):
            if reached(int(sample[column])):
                return (before[0] + sample[0]) / 2
        return self.samples[-1][0]


def fold_against_write(
    start_burst: Callable[[], list[str]],
    wait_ended: Callable[[list[str]], None],
    engine: Engine,
    scope: tuple[str, str],
    projector: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Run the burst (``start_burst`` starts it, ``wait_ended`` waits for its executions' end) with the
    sampler beside it; both rates, the writing window and what the projector process counted."""
    sampler = Sampler(engine, first_id(utc_now()), scope)
    watching = threading.Thread(target=sampler.run, args=(900.0,), daemon=True)
    process_before = projector() if projector else {}
    begin = time.perf_counter()
    watching.start()
    ids = start_burst()
    wait_ended(ids)
    window = time.perf_counter() - begin
    sampler.writes_ended = True
    watching.join()
    process = projector() if projector else {}
    written = sampler.samples[-1][1]
    write_from, write_to = sampler.span(1, written)
    fold_from, fold_to = sampler.span(2, written)
    counted = ("deliveries", "duplicates", "locked_folds", "applied_events")
    return {
        "written": written,
        "window_s": window,
        "write_s": write_to - write_from,
        "fold_s": fold_to - fold_from,
        "written_per_s": written / (write_to - write_from),
        "folded_per_s": written / (fold_to - fold_from),
        "first_fold_after_s": fold_from - write_from,
        "catch_up_s": fold_to - write_to,
        **({f"{k}_in_window": float(process[k] - process_before[k]) for k in counted} if projector else {}),
    }


def fold_behind(
    start_burst: Callable[[], list[str]],
    wait_ended: Callable[[list[str]], None],
    engine: Engine,
    scope: tuple[str, str],
    pause: Callable[[], AbstractContextManager[None]],
) -> dict[str, float]:
    """The second burst: written with the projector's push paused (``pause``), folded after the resume.
    The write rate over its writing span and the fold rate from the resume to the last event folded."""
    sampler = Sampler(engine, first_id(utc_now()), scope)
    watching = threading.Thread(target=sampler.run, args=(900.0,), daemon=True)
    with pause():
        watching.start()
        wait_ended(start_burst())
    resumed = time.perf_counter()
    sampler.writes_ended = True
    watching.join()
    written = sampler.samples[-1][1]
    write_from, write_to = sampler.span(1, written)
    folded_early = max(folded for at, _written, folded in sampler.samples if at <= resumed)
    _first, fold_to = sampler.span(2, written)
    return {
        "written": written,
        "write_s": write_to - write_from,
        "written_per_s": written / (write_to - write_from),
        "drain_s": fold_to - resumed,
        "folded_per_s": written / (fold_to - resumed),
        "folded_while_paused": folded_early,
    }


def print_fold(burst: int, fold: dict[str, Any], *, ratio: bool = True) -> None:
    print(
        f"burst of {burst} 3-step executions: {fold['written']:.0f} events written over {fold['write_s']:.1f} s "
        f"({fold['written_per_s']:.0f}/s); the projector folded them over {fold['fold_s']:.1f} s "
        f"({fold['folded_per_s']:.0f}/s), from {fold['first_fold_after_s']:.1f} s after the first write to "
        f"{fold['catch_up_s']:.1f} s after the last (the projection current then)"
    )
    if "deliveries_in_window" in fold:
        print(
            f"  the projector took {fold['deliveries_in_window']:.0f} deliveries ({fold['duplicates_in_window']:.0f} "
            f"duplicates, {fold['locked_folds_in_window']:.0f} folded under the lock, "
            f"{fold['applied_events_in_window']:.0f} events applied)"
        )
    print(f"  folding beside the writes: {fold['folded_per_s'] / fold['written_per_s']:.2f} of the write rate")
    behind = fold["behind"]
    print(
        f"the same burst written with the projector's push paused: {behind['written']:.0f} events over "
        f"{behind['write_s']:.1f} s ({behind['written_per_s']:.0f}/s); resumed, the projector folded them all in "
        f"{behind['drain_s']:.1f} s ({behind['folded_per_s']:.0f}/s; {behind['folded_while_paused']:.0f} folded "
        "before the resume)"
    )
    if ratio:
        print(f"ratio projector_fold_to_write: {behind['folded_per_s'] / behind['written_per_s']:.2f}")
