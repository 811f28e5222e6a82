"""The daily partitions of ``event`` (by range of snowflake ``event_id``) and ``outbox`` (by ``created_at``).

:func:`ensure_ahead` creates today's partition and the next days' (a row that landed in the ``DEFAULT``
partition meanwhile is moved into its day in the same transaction); :func:`partitions` lists them with
the end of the time they cover, which :mod:`noetl_cloud.retention.service` compares with the policies
before it drops one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, text

from noetl_cloud.ids import EPOCH_MS, TIMESTAMP_SHIFT

TABLES = ("event", "outbox")
_DAILY = re.compile(r"^(event|outbox)_p(\d{8})$")
_BOUND = re.compile(r"FOR VALUES FROM \((.+)\) TO \((.+)\)")


def first_id(at: datetime) -> int:
    """The smallest snowflake minted at or after ``at`` (0 before the epoch)."""
    return max(0, int(at.timestamp() * 1000) - EPOCH_MS) << TIMESTAMP_SHIFT


def id_time(event_id: int) -> datetime:
    """When the snowflake ``event_id`` was minted (to the millisecond)."""
    return datetime.fromtimestamp(((event_id >> TIMESTAMP_SHIFT) + EPOCH_MS) / 1000, tz=UTC)


def day_start(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Partition:
    table: str  # the parent: ``event`` or ``outbox``
    name: str
    ends: datetime | None  # the end of the time it covers; None for the DEFAULT partition
    starts: datetime | None  # its start; None for MINVALUE and the DEFAULT partition
    lower: str  # its bounds as PostgreSQL prints them (MINVALUE, an id, a quoted timestamp)
    upper: str


def partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table``, oldest first (the DEFAULT partition last)."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE p.relname = :table AND p.relnamespace = c.relnamespace"
        ),
        {"table": table},
    ).all()
    found = []
    for name, bound in rows:
        match = _BOUND.match(bound)
        if match is None:
            found.append(Partition(table, name, None, None, "", ""))
            continue
        lower, upper = match.group(1).strip("'"), match.group(2).strip("'")  # PostgreSQL quotes even numbers
        ends, starts = _time(table, upper), None if lower == "MINVALUE" else _time(table, lower)
        found.append(Partition(table, name, ends, starts, lower, upper))
    return sorted(found, key=lambda p: (p.ends is None, p.ends or datetime.max.replace(tzinfo=UTC)))


def _time(table: str, bound: str) -> datetime:
    at = id_time(int(bound)) if table == "event" else datetime.fromisoformat(bound)
    return at.astimezone(UTC)


def _bounds(table: str, day: datetime) -> tuple[str, str, str]:
    """The SQL bounds of ``table``'s partition of ``day`` and the default rows' condition for them."""
    following = day + timedelta(days=1)
    if table == "event":
        lo, hi = str(first_id(day)), str(first_id(following))
        return lo, hi, f"event_id >= {lo} AND event_id < {hi}"
    lo, hi = f"'{day.isoformat()}'", f"'{following.isoformat()}'"
    return lo, hi, f"created_at >= {lo} AND created_at < {hi}"


def ensure_ahead(conn: Connection, days_ahead: int, now: datetime) -> list[str]:
    """Create the missing daily partitions of today and the ``days_ahead`` days after it; their names.

    Rows of those days already in the DEFAULT partition are moved into the new partition before it is
    attached (attaching checks that the DEFAULT partition holds none of its range).
    """
    today = day_start(now)
    listed = {table: partitions(conn, table) for table in TABLES}
    created = []
    for n in range(days_ahead + 1):
        day = today + timedelta(days=n)
        for table in TABLES:
            name = f"{table}_p{day:%Y%m%d}"
            if any(_covers(p, day) for p in listed[table]):
                continue  # exists, or a wider partition (the history one) covers the day
            lo, hi, rows_of_day = _bounds(table, day)
            conn.execute(text(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'))
            conn.execute(
                text(
                    f'WITH moved AS (DELETE FROM "{table}_default" WHERE {rows_of_day} RETURNING *) '
                    f'INSERT INTO "{name}" SELECT * FROM moved'
                )
            )
            conn.execute(text(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" FOR VALUES FROM ({lo}) TO ({hi})'))
            created.append(name)
    return created


def _covers(partition: Partition, day: datetime) -> bool:
    if partition.ends is None:
        return False  # the DEFAULT partition
    return (partition.starts is None or partition.starts <= day) and day < partition.ends


def drop(conn: Connection, partition: Partition) -> None:
    """Detach and drop ``partition`` (its rows must have been archived or be expired)."""
    if partition.ends is None:
        raise ValueError("the DEFAULT partition is never dropped")
    conn.execute(text(f'DROP TABLE "{partition.name}"'))


def daily_name(table: str, day: datetime) -> str:
    return f"{table}_p{day_start(day):%Y%m%d}"


def is_daily(name: str) -> bool:
    return _DAILY.match(name) is not None
