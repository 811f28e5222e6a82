from __future__ import annotations

import json
import logging

import pytest
from flask import Flask
from pydantic import BaseModel, Field

from noetl_cloud.errors import Conflict, Unavailable
from noetl_cloud.observability import CloudLoggingFormatter, current_trace
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app, json_body

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Item(BaseModel):
    name: str = Field(min_length=1)
    count: int = Field(ge=0)


@pytest.fixture
def app() -> Flask:
    app = create_app("test", Settings(max_request_bytes=2048))

    @app.post("/items")
    def items() -> tuple[dict[str, object], int]:
        item = json_body(Item)
        trace = current_trace.get()
        return {"name": item.name, "trace_id": trace.trace_id if trace else None}, 201

    @app.get("/conflict")
    def conflict() -> None:
        raise Conflict("already there", code="already_there", details={"id": "1"})

    @app.get("/down")
    def down() -> None:
        raise Unavailable("database unreachable")

    @app.get("/bug")
    def bug() -> None:
        raise RuntimeError("secret=hunter2 leaked in an exception text")

    return app


def error_of(response) -> dict[str, object]:  # type: ignore[no-untyped-def]
    assert response.is_json
    return response.get_json()["error"]


def test_valid_body_is_parsed_and_trace_is_current(app: Flask) -> None:
    response = app.test_client().post("/items", json={"name": "a", "count": 1}, headers={"traceparent": TRACEPARENT})
    assert response.status_code == 201
    assert response.get_json() == {"name": "a", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
    assert response.headers["X-Request-Id"]


def test_invalid_body_is_422_with_field_paths_and_no_input_echo(app: Flask) -> None:
    response = app.test_client().post("/items", json={"name": "", "count": -1, "extra": "x"})
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_failed"
    assert {d["field"] for d in error["details"]} == {"name", "count"}  # type: ignore[index, union-attr]
    assert "input" not in json.dumps(error)


def test_non_json_body_is_400_invalid_json(app: Flask) -> None:
    for body in (b"not json", b"[1,2]"):
        response = app.test_client().post("/items", data=body, content_type="application/json")
        assert response.status_code == 400 and error_of(response)["code"] == "invalid_json"


def test_oversized_body_is_413_before_it_is_read(app: Flask) -> None:
    response = app.test_client().post("/items", data=b"x" * 4096, content_type="application/json")
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"


def test_known_errors_keep_status_code_and_details(app: Flask) -> None:
    response = app.test_client().get("/conflict")
    assert response.status_code == 409
    assert error_of(response) == {"code": "already_there", "message": "already there", "details": {"id": "1"}}
    assert app.test_client().get("/down").status_code == 503


def test_werkzeug_errors_use_the_json_model(app: Flask) -> None:
    client = app.test_client()
    assert error_of(client.get("/nowhere"))["code"] == "not_found"
    assert error_of(client.delete("/items"))["code"] == "method_not_allowed"


def test_unexpected_errors_are_500_without_their_text(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = app.test_client().get("/bug")
    assert response.status_code == 500
    assert error_of(response) == {"code": "internal_error", "message": "internal error"}
    assert "hunter2" not in response.get_data(as_text=True)
    assert any(r.exc_info for r in caplog.records)


def test_healthz_and_request_id_echo(app: Flask) -> None:
    response = app.test_client().get("/healthz", headers={"X-Request-Id": "req-42"})
    assert response.get_json() == {"status": "ok", "role": "test"}
    assert response.headers["X-Request-Id"] == "req-42"
    bad = app.test_client().get("/healthz", headers={"X-Request-Id": "bad id with <script>"})
    assert bad.headers["X-Request-Id"] != "bad id with <script>"


def test_cloud_trace_header_is_a_fallback(app: Flask) -> None:
    response = app.test_client().post(
        "/items",
        json={"name": "a", "count": 0},
        headers={"X-Cloud-Trace-Context": "105445aa7843bc8bf206b12000100000/1;o=1"},
    )
    assert response.get_json()["trace_id"] == "105445aa7843bc8bf206b12000100000"


def test_trace_does_not_leak_between_requests(app: Flask) -> None:
    client = app.test_client()
    client.post("/items", json={"name": "a", "count": 0}, headers={"traceparent": TRACEPARENT})
    assert client.post("/items", json={"name": "a", "count": 0}).get_json()["trace_id"] is None
    assert current_trace.get() is None


def test_log_lines_carry_trace_and_execution_in_cloud_logging_shape() -> None:
    from noetl_cloud.observability import TraceContext, execution_scope

    formatter = CloudLoggingFormatter(project_id="proj", role="execute")
    record = logging.LogRecord("noetl", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    record.listener = "github"
    token = current_trace.set(TraceContext.parse(TRACEPARENT))
    try:
        with execution_scope("42"):
            line = json.loads(formatter.format(record))
    finally:
        current_trace.reset(token)
    assert line["severity"] == "WARNING" and line["message"] == "hello world" and line["role"] == "execute"
    assert line["logging.googleapis.com/trace"] == "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736"
    assert line["logging.googleapis.com/spanId"] == "00f067aa0ba902b7"
    assert line["execution_id"] == "42" and line["listener"] == "github"
