"""Tools: registry, noop, python (subprocess), http (against a local http.server thread)."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_cloud.engine import ToolCall
from noetl_cloud.tools import ToolRegistry, UnknownTool, default_registry
from noetl_cloud.tools.egress import EgressPolicy
from noetl_cloud.tools.http import HttpTool
from noetl_cloud.tools.noop import NoopTool
from noetl_cloud.tools.python import PythonTool
from tests.unit.engine.conftest import LOOPBACK_ALLOW

LOOPBACK = HttpTool(egress=EgressPolicy.from_allowlist(LOOPBACK_ALLOW))


def call(kind: str, config: dict[str, Any], spec: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(kind=kind, config=config, spec=spec or {}, execution_id="1", step="s", task="t", attempt=1)


def test_registry_resolves_kinds_and_refuses_duplicates() -> None:
    registry = default_registry()
    assert registry.kinds() == ["http", "noop", "playbook", "postgres", "python", "subscription"]
    assert registry.get("noop").kind == "noop"
    with pytest.raises(UnknownTool) as info:
        registry.get("nope")
    assert info.value.code == "unknown_tool" and "noop" in info.value.message
    with pytest.raises(ValueError):
        ToolRegistry([NoopTool(), NoopTool()])


def test_noop_returns_its_result_field() -> None:
    assert NoopTool().run(call("noop", {"result": {"a": 1}})).result == {"a": 1}


def test_python_calls_main_with_args_and_returns_json() -> None:
    code = "def main(a, b=2):\n    print('noise')\n    return {'sum': a + b}\n"
    outcome = PythonTool().run(call("python", {"code": code, "args": {"a": 1, "b": 5}}))
    assert outcome.status == "ok" and outcome.result == {"sum": 6}


def test_python_without_main_reads_result() -> None:
    assert PythonTool().run(call("python", {"code": "result = {'ok': True}"})).result == {"ok": True}


def test_python_exception_type_is_in_the_outcome() -> None:
    outcome = PythonTool().run(call("python", {"code": "def main():\n    raise KeyError('k')\n"}))
    assert outcome.status == "error" and outcome.to_dict()["py"] == {"exception_type": "KeyError"}
    assert outcome.error is not None and "KeyError" in outcome.error["message"]


def test_python_non_json_result_is_an_error() -> None:
    outcome = PythonTool().run(call("python", {"code": "def main():\n    return object()\n"}))
    assert outcome.status == "error" and outcome.extra["py"]["exception_type"] == "TypeError"


def test_python_timeout_is_an_error_outcome() -> None:
    code = "import time\ndef main():\n    time.sleep(5)\n"
    outcome = PythonTool().run(call("python", {"code": code}, {"timeout": 0.5}))
    assert outcome.status == "error" and outcome.error is not None and outcome.error["kind"] == "timeout"


def test_python_exit_without_result_is_a_crash() -> None:
    outcome = PythonTool().run(call("python", {"code": "import os\nos._exit(3)\n"}))
    assert outcome.status == "error" and outcome.error is not None and outcome.error["kind"] == "crashed"


def test_http_get_with_params_and_headers(api: str) -> None:
    outcome = LOOPBACK.run(
        call("http", {"url": f"{api}/x", "params": {"page": 2, "on": True}, "headers": {"Authorization": "Bearer t"}})
    )
    assert outcome.status == "ok" and outcome.extra["http"]["status"] == 200
    assert outcome.result["data"] == {"path": "/x", "query": {"page": "2", "on": "true"}, "auth": "Bearer t"}


def test_http_post_json(api: str) -> None:
    outcome = LOOPBACK.run(call("http", {"method": "post", "url": f"{api}/x", "json": {"a": [1]}}))
    assert (
        outcome.status == "ok"
        and outcome.result["status_code"] == 201
        and outcome.result["data"] == {"received": {"a": [1]}}
    )


def test_http_error_status_is_an_error_outcome_with_http_status(api: str) -> None:
    outcome = LOOPBACK.run(call("http", {"url": f"{api}/fail"}, {"timeout": {"connect": 2, "read": 2}}))
    assert outcome.status == "error" and outcome.to_dict()["http"]["status"] == 503
    assert outcome.result["data"] == {"error": "busy"}
    host, port = api.removeprefix("http://").split(":")
    assert outcome.error is not None and (outcome.error["kind"], outcome.error["status"]) == ("http_status", 503)
    assert outcome.error["target"] == {"http_host": host, "http_port": int(port)}


def test_http_text_body_is_text(api: str) -> None:
    assert LOOPBACK.run(call("http", {"url": f"{api}/text"})).result["data"] == "plain"


def test_http_connection_refused_is_an_error_outcome() -> None:
    outcome = LOOPBACK.run(call("http", {"url": "http://127.0.0.1:9/"}, {"timeout": 2}))
    assert outcome.status == "error" and outcome.extra["http"]["status"] is None
    assert outcome.error is not None and outcome.error["kind"] == "connection"
    assert outcome.error["target"] == {"http_host": "127.0.0.1", "http_port": 9}
