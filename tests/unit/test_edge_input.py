"""Hostile input at the edge, as pure logic (issue #21): names in paths, bodies, directives, JSON depth."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_cloud.ingress.listeners import ListenerDirectory
from noetl_cloud.web.client import ApiResponse, segment


class RecordingApi:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def get(self, path: str, **_kw: Any) -> ApiResponse:
        self.paths.append(path)
        return ApiResponse(404, {"error": {"code": "unknown_listener", "message": "no"}}, {})


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("hooks?x", "hooks%3Fx"),
        ("a#b", "a%23b"),
        ("a b", "a%20b"),
        ("a\r\nb", "a%0D%0Ab"),
        ("a/b", "a%2Fb"),
        (42, "42"),
    ],
)
def test_a_path_segment_is_percent_encoded_whole(value: object, encoded: str) -> None:
    assert segment(value) == encoded


def test_the_listener_directory_asks_the_control_plane_for_exactly_the_name_it_was_given() -> None:
    api = RecordingApi()
    with pytest.raises(Exception, match="no listener"):
        ListenerDirectory(api).get("hooks?x")  # type: ignore[arg-type]
    assert api.paths == ["/api/internal/ingress/hooks%3Fx"]
