"""Every command the demo prints after its summary works as printed: the ``noetl-cloud`` ones parse, each
API call names a route of the control plane with the parameters it requires (the replay state its
cutoff), and the logs folder is the stack's own. Nothing is executed against a stack."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import Flask

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.cli import build_parser
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from noetl_cloud.demo.report import inspect_commands
from noetl_cloud.replay.api import blueprint
from noetl_cloud.replay.service import Cutoff
from noetl_cloud.settings import Settings
from noetl_cloud.web.errors import register_error_handlers

NOW = datetime(2026, 11, 25, 16, 30, 1, 250000, tzinfo=UTC)
SUMMARY = {"executions": {"ids": ["384013987326132224"]}, "playbook": {"version": 7}, "run": "r1"}


def printed(logs: Path) -> list[str]:
    text = inspect_commands(SUMMARY, 15430, "postgresql://noetl:pw@127.0.0.1:15432/noetl", str(logs), now=NOW)
    return [line.strip() for line in text.splitlines()[1:] if not line.strip().startswith("#")]


def api_urls(commands: list[str]) -> list[str]:
    """The URLs of the curl commands sent to ``$NOETL_API_URL``, as the shell would expand them."""
    urls = []
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "curl" and argv[-1].startswith("$NOETL_API_URL"):
            urls.append(argv[-1].replace("$NOETL_API_URL", "http://127.0.0.1:15440"))
    return urls


def test_the_noetl_cloud_commands_parse_against_the_cli(tmp_path: Path) -> None:
    commands = [shlex.split(c) for c in printed(tmp_path) if c.startswith(".venv/bin/noetl-cloud")]
    assert {argv[1] for argv in commands} == {"replay", "spool"}
    for argv in commands:
        build_parser().parse_args(argv[1:])  # exits 2 on a missing required option


def test_each_api_call_names_a_route_of_the_control_plane(tmp_path: Path) -> None:
    routes = build_app(ControlPlane(Settings()), InternalAuth(token="t")).url_map.bind("localhost")
    urls = api_urls(printed(tmp_path))
    assert len(urls) == 5
    for url in urls:
        routes.match(urlsplit(url).path, method="GET")  # raises NotFound for a route that does not exist


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(args)
        return {"ok": True}


def test_the_replay_state_call_carries_the_cutoff_it_needs(tmp_path: Path) -> None:
    (url,) = [u for u in api_urls(printed(tmp_path)) if "/api/replay/state" in u]
    service = Recorder()
    app = Flask("replay")
    register_error_handlers(app)
    app.register_blueprint(blueprint(lambda: service))  # type: ignore[arg-type, return-value]
    parts = urlsplit(url)
    response = app.test_client().get(f"{parts.path}?{parts.query}")
    assert response.status_code == 200, response.get_json()
    (call,) = service.calls
    assert call[:4] == ("default", "default", SUMMARY["executions"]["ids"][0], Cutoff(time=NOW))  # type: ignore[index]
    assert parse_qs(parts.query)["projection"] == ["frames"]


def test_the_logs_command_names_the_stacks_own_state_folder(tmp_path: Path) -> None:
    assert printed(tmp_path / "state" / "logs")[-1] == f"ls {tmp_path / 'state' / 'logs'}/"
