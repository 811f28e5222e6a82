"""The cadence of a scheduled subscription (``activation: scheduled``): unix-cron in UTC, five fields
(minute hour day month weekday, Cloud Scheduler's form) or six with a leading seconds field, evaluated
by cronsim. A Subscription whose cadence is not one is refused when it is registered."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

#: One field of a unix-cron expression: numbers, names (JAN, MON), ``*``, ``/``, ``,``, ``-``.
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-]+$")


def cadence_problem(cadence: str | None) -> str | None:
    """Why ``cadence`` cannot be scheduled, or ``None``."""
    if not cadence:
        return "activation: scheduled needs a cadence"
    fields = cadence.split()
    shape = "a unix-cron expression: minute hour day month weekday, optionally after a seconds field"
    if len(fields) not in (5, 6) or not all(_CRON_FIELD.match(f) for f in fields):
        return f"cadence {cadence!r} is not {shape}"
    try:
        CronSim(cadence, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return f"cadence {cadence!r} is not {shape} ({exc})"
    return None


def latest_due(cadence: str, at: datetime) -> datetime:
    """The last slot of ``cadence`` at or before ``at`` (UTC, whole seconds)."""
    after = at.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
    return next(CronSim(cadence, after, reverse=True))


def next_due(cadence: str, at: datetime) -> datetime:
    """The first slot of ``cadence`` after ``at`` (UTC)."""
    return next(CronSim(cadence, at.astimezone(UTC)))
