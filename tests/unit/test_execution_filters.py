"""The executions list's query string: what it accepts, what it refuses (with which code), and the cursor."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from noetl_cloud.control.execution_queries import DEFAULT_LIMIT, decode_cursor, encode_cursor, parse_filters
from noetl_cloud.errors import BadRequest


def test_no_filter_is_the_first_page_of_everything() -> None:
    filters = parse_filters({})
    assert filters.statuses == () and filters.path is None and filters.cursor is None
    assert filters.limit == DEFAULT_LIMIT


def test_every_filter_is_parsed_to_its_type() -> None:
    cursor = encode_cursor(datetime(2026, 11, 25, 16, 0, 0, 123456, tzinfo=UTC), 384018884260081664)
    filters = parse_filters(
        {
            "status": "failed,cancelled",
            "path": "demo/orders",
            "version": "3",
            "subscription": "demo/webhooks/standard",
            "pool": "iot-1",
            "parent": "384018884260081664",
            "since": "2026-11-25T00:00:00Z",
            "until": "2026-11-26T00:00:00+01:00",
            "limit": "500",
            "cursor": cursor,
        }
    )
    assert filters.statuses == ("failed", "cancelled") and filters.version == 3 and filters.parent == 384018884260081664
    assert filters.since == datetime(2026, 11, 25, tzinfo=UTC) and filters.until is not None
    assert filters.limit == 500 and filters.subscription == "demo/webhooks/standard" and filters.pool == "iot-1"
    assert filters.cursor == (datetime(2026, 11, 25, 16, 0, 0, 123456, tzinfo=UTC), 384018884260081664)


def test_the_cursor_round_trips_and_is_opaque() -> None:
    at = datetime(2026, 11, 25, 16, 0, tzinfo=UTC)
    token = encode_cursor(at, 42)
    assert "42" not in token and "=" not in token
    assert decode_cursor(token) == (at, 42)


@pytest.mark.parametrize(
    ("args", "code", "parameter"),
    [
        ({"state": "failed"}, "unknown_filter", "state"),
        ({"status": "failed,running"}, "invalid_filter", "status"),
        ({"version": "1"}, "invalid_filter", "version"),
        ({"path": "p", "version": "0"}, "invalid_filter", "version"),
        ({"pool": "../x"}, "invalid_filter", "pool"),
        ({"parent": "12345678901234567890"}, "invalid_filter", "parent"),
        ({"until": "2026-13-01T00:00:00Z"}, "invalid_filter", "until"),
        ({"since": "2026-11-25T00:00:00"}, "invalid_filter", "since"),
        ({"limit": "-1"}, "invalid_filter", "limit"),
        ({"path": "x" * 513}, "invalid_filter", "path"),
        ({"cursor": "bm90IGpzb24"}, "invalid_cursor", "cursor"),
        ({"cursor": encode_cursor(datetime(2026, 1, 1), 1)}, "invalid_cursor", "cursor"),  # no offset
    ],
)
def test_what_cannot_be_used_is_a_400_naming_the_parameter(args: dict[str, str], code: str, parameter: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_filters(args)
    assert refused.value.code == code and refused.value.details == {"parameter": parameter}
