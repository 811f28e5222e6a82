"""Task isolation (issue #21 item 6): a python task does not inherit the worker's environment, and an http
task reaches only public addresses unless the operator allowlists one (NOETL_HTTP_TOOL_ALLOW)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from noetl_cloud.engine import ToolCall
from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings
from noetl_cloud.tools.egress import EgressDenied, EgressPolicy, is_public, parse_entry
from noetl_cloud.tools.http import HttpTool
from noetl_cloud.tools.python import PythonTool
from noetl_cloud.tools.registry import default_registry

SECRET = "worker-secret-0f3a"


def call(kind: str, config: dict[str, Any]) -> ToolCall:
    return ToolCall(kind=kind, config=config, spec={"timeout": 10}, execution_id="1", step="s", task="t", attempt=1)


def http_get(tool: HttpTool, url: str) -> Any:
    return tool.run(call("http", {"url": url}))


@pytest.fixture
def worker_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The worker's own environment holds the secrets a deployed worker holds."""
    for name in ("NOETL_INTERNAL_API_TOKEN", "NOETL_DATABASE_URL", "NOETL_WORKER_PUSH_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, SECRET)
    yield


@pytest.mark.usefixtures("worker_secrets")
def test_a_python_task_cannot_see_a_secret_env_var_of_the_worker() -> None:
    assert os.environ["NOETL_INTERNAL_API_TOKEN"] == SECRET
    code = "import os\ndef main():\n    return dict(os.environ)\n"
    outcome = PythonTool().run(call("python", {"code": code}))
    assert outcome.status == "ok", outcome.error
    assert SECRET not in str(outcome.result)
    assert not any(name.startswith(("NOETL_", "AWS_", "GOOGLE_")) for name in outcome.result)
    assert set(outcome.result) <= {"PATH", "LANG", "LC_ALL", "TZ", "LC_CTYPE"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://169.254.169.254/computeMetadata/v1/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://2130706433:9/",  # 127.0.0.1 as one decimal number
        "http://localhost:9/",  # a host name resolving to loopback
    ],
)
def test_the_http_tool_refuses_loopback_link_local_private_and_metadata_addresses(url: str) -> None:
    outcome = http_get(HttpTool(), url)
    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error["kind"] == "egress_denied", outcome.error


def test_a_name_resolving_to_loopback_is_refused_even_when_another_address_is_public() -> None:
    def rebinding(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "127.0.0.1"]

    outcome = http_get(HttpTool(egress=EgressPolicy(resolve=rebinding)), "http://rebind.example:9/")
    assert outcome.error is not None and outcome.error["kind"] == "egress_denied"


def test_an_allowlisted_address_is_reached_and_the_connection_goes_to_the_checked_address(api: str) -> None:
    port = int(api.rsplit(":", 1)[1])
    seen: list[str] = []

    def resolve(host: str, p: int) -> list[str]:
        seen.append(host)
        return ["127.0.0.1"]

    # "orders.test" resolves only through the policy's resolver: reaching the API proves the socket was
    # opened to the address that was checked, not to a second resolution of the name.
    tool = HttpTool(egress=EgressPolicy.from_allowlist([f"127.0.0.1:{port}"], resolve))
    outcome = http_get(tool, f"http://orders.test:{port}/x")
    assert outcome.status == "ok", outcome.error
    assert outcome.result["data"]["path"] == "/x" and seen == ["orders.test"]
    other_port = http_get(tool, f"http://orders.test:{port + 1}/x")
    assert other_port.error is not None and other_port.error["kind"] == "egress_denied"


def test_the_allowlist_comes_from_the_setting_and_the_worker_registry_uses_it(api: str) -> None:
    settings = Settings.from_env({"NOETL_HTTP_TOOL_ALLOW": f"{api.removeprefix('http://')}, 10.8.0.0/16"})
    tool = default_registry(http_allow=settings.http_tool_allow).get("http")
    assert tool.run(call("http", {"url": f"{api}/x"})).status == "ok"
    refused = default_registry().get("http").run(call("http", {"url": f"{api}/x"}))
    assert refused.error is not None and refused.error["kind"] == "egress_denied"


def test_a_bad_allowlist_entry_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"NOETL_HTTP_TOOL_ALLOW": "10.0.0.0/8, not a host"})
    assert "NOETL_HTTP_TOOL_ALLOW" in info.value.message


def test_allowlist_entries_parse_networks_ports_and_names() -> None:
    assert parse_entry("[::1]:8080").port == 8080
    assert parse_entry("10.0.0.7:443").port == 443
    assert str(parse_entry("10.8.0.0/16").network) == "10.8.0.0/16"
    assert parse_entry("Orders.Internal:8443").host == "orders.internal"
    with pytest.raises(ValueError):
        parse_entry("10.0.0.1:99999")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("fd00:ec2::254", False),  # the AWS metadata server over IPv6
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("224.0.0.1", False),
        ("0.0.0.0", False),  # noqa: S104 - an address judged, not bound
    ],
)
def test_public_means_globally_routable(address: str, public: bool) -> None:
    import ipaddress

    assert is_public(ipaddress.ip_address(address)) is public


def test_egress_denied_is_not_retryable_connection_noise() -> None:
    with pytest.raises(EgressDenied):
        EgressPolicy().addresses("127.0.0.1", 80)


def test_a_redirect_to_a_refused_address_is_not_followed() -> None:
    """A 3xx is the task's answer (the tool does not follow redirects); a task that follows the Location
    makes a new request, checked like any other."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/computeMetadata/v1/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        tool = HttpTool(egress=EgressPolicy.from_allowlist([f"127.0.0.1:{port}"]))
        outcome = http_get(tool, f"http://127.0.0.1:{port}/start")
    finally:
        server.shutdown()
        server.server_close()
    assert outcome.status == "ok" and outcome.result["status_code"] == 302
    followed = http_get(tool, outcome.result["headers"]["Location"])
    assert followed.error is not None and followed.error["kind"] == "egress_denied"


def test_the_local_stack_allows_the_demo_api_port_and_what_its_launcher_adds(tmp_path: Any) -> None:
    from noetl_cloud.local.layout import DEMO_API_PORT
    from noetl_cloud.local.stack import LocalStack
    from noetl_cloud.local.tokens import ensure_tokens

    env = {"NOETL_LOCAL_PORT_BASE": "29430", "NOETL_LOCAL_STATE_DIR": str(tmp_path)}
    keys = ensure_tokens(tmp_path)
    allow = LocalStack.from_env(env)._role_env({}, keys)["NOETL_HTTP_TOOL_ALLOW"]
    assert allow == f"127.0.0.1:{29430 + DEMO_API_PORT}"
    more = LocalStack.from_env({**env, "NOETL_LOCAL_HTTP_TOOL_ALLOW": "127.0.0.1:8080"})._role_env({}, keys)
    assert Settings.from_env({"NOETL_HTTP_TOOL_ALLOW": more["NOETL_HTTP_TOOL_ALLOW"]}).http_tool_allow == (
        allow,
        "127.0.0.1:8080",
    )
