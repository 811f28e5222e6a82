"""Bad input against a role's HTTP API: hypothesis builds requests for every route of a Flask app —
malformed paths, query strings, bodies and content types — and each answer must be a client error in
the JSON error model, never a 500 and never an HTML page."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from flask import Flask
from flask.testing import FlaskClient
from hypothesis import strategies as st

_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def routes(app: Flask) -> list[tuple[str, tuple[str, ...]]]:
    """Every rule of ``app`` but static files, with the methods it answers."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        methods = tuple(sorted(m for m in rule.methods or () if m in _METHODS))
        found.append((rule.rule, methods))
    return sorted(found)


def _segment(kind: str | None) -> st.SearchStrategy[str]:
    if kind == "int":
        return st.integers(-(2**70), 2**70).map(str) | st.text(max_size=8).map(lambda t: quote(t, safe=""))
    return st.text(min_size=1, max_size=30).map(lambda t: quote(t, safe="" if kind != "path" else "/"))


@st.composite
def requests(draw: Any, app: Flask) -> dict[str, Any]:
    """One request: a route, a method (sometimes one it does not answer), a path, a query and a body."""
    rule, methods = draw(st.sampled_from(routes(app)))
    method = draw(st.sampled_from(methods) if draw(st.integers(0, 9)) else st.sampled_from(_METHODS))
    path = _CONVERTER.sub(lambda m: draw(_segment(m.group(1))), rule)
    query = draw(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=3))
    kind = draw(st.sampled_from(["none", "json", "bytes", "text"]))
    body: bytes | None = None
    content_type = None
    if kind == "json":
        body, content_type = json.dumps(draw(json_values)).encode(), "application/json"
    elif kind == "bytes":
        body = draw(st.binary(max_size=200))
        content_type = draw(st.sampled_from(["application/json", "application/octet-stream", "application/yaml"]))
    elif kind == "text":
        body, content_type = (
            draw(st.text(max_size=200)).encode(),
            draw(st.sampled_from(["application/yaml", "text/plain"])),
        )
    return {"method": method, "path": path, "query_string": query, "data": body, "content_type": content_type}


def check(client: FlaskClient, request: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    """The answer is no 5xx but an honest 503, and every 4xx/5xx is the JSON error model."""
    response = client.open(
        request["path"],
        method=request["method"],
        query_string=request["query_string"],
        data=request["data"],
        content_type=request["content_type"],
        headers=headers or {},
    )
    described = f"{request['method']} {request['path']} -> {response.status_code}"
    assert response.status_code < 500 or response.status_code == 503, described + f" {response.get_data()[:300]!r}"
    if response.status_code >= 400:
        body = response.get_json(silent=True)
        assert isinstance(body, dict) and isinstance(body.get("error"), dict), described
        assert isinstance(body["error"].get("code"), str) and body["error"]["code"], described
        assert isinstance(body["error"].get("message"), str), described
