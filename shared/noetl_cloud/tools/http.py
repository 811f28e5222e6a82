"""``kind: http``: one HTTP request with urllib3.

Task fields: ``method`` (GET), ``url``, ``params`` (query), ``headers``, ``json`` (a JSON body) or ``body``
(text). ``spec.timeout`` is seconds or ``{connect, read}``. The tool does not retry (§6.4: retry with the
task policy). The result is ``{status_code, headers, data}`` where ``data`` is the body parsed by content
type (JSON, else text). A status of 400 or more is an error outcome; ``outcome.http`` always holds
``{status, headers}`` (``status`` is ``None`` when no response arrived). A failed request's error names
what it was aimed at, ``error.target = {http_host, http_port}`` (and ``error.status`` for ``http_status``):
a subscription's declared ``downstreams`` match it (``noetl_cloud.spool.downstreams``).

Redirects are not followed (``retries=False``: a 3xx is the result). Egress is checked per connection by an
:class:`~noetl_cloud.tools.egress.EgressPolicy`: by default only public addresses; the resolved address is
checked and then connected to, so DNS rebinding cannot reach what the check refused. A refused address is the
error outcome ``egress_denied`` (no retry helps).
"""

from __future__ import annotations

import json
import socket
from typing import Any, ClassVar
from urllib.parse import urlencode

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util import connection

from noetl_cloud.engine.outcome import Outcome, ToolCall
from noetl_cloud.tools.egress import EgressDenied, EgressPolicy

DEFAULT_TIMEOUT = 30.0


class HttpTool:
    """An HTTP client task. One connection pool per tool instance, connecting only where ``egress`` allows
    (default: public addresses only)."""

    kind = "http"
    raw_fields: tuple[str, ...] = ()

    def __init__(self, pool: urllib3.PoolManager | None = None, *, egress: EgressPolicy | None = None) -> None:
        self._pool = pool
        self.egress = egress or EgressPolicy()

    @property
    def pool(self) -> urllib3.PoolManager:
        """The connection pool, created on first use."""
        if self._pool is None:
            self._pool = guarded_pool_manager(self.egress)
        return self._pool

    def run(self, call: ToolCall) -> Outcome:
        """Send the request and map the response to an outcome."""
        config = call.config
        url = config.get("url")
        if not isinstance(url, str) or not url:
            return Outcome.fail("bad_task", "an http task needs a `url`", http={"status": None, "headers": {}})
        method = str(config.get("method", "GET")).upper()
        headers = {str(k): str(v) for k, v in (config.get("headers") or {}).items()}
        params = {str(k): _param(v) for k, v in (config.get("params") or {}).items() if v is not None}
        body: bytes | None = None
        if config.get("json") is not None:
            body = json.dumps(config["json"]).encode()
            headers.setdefault("Content-Type", "application/json")
        elif config.get("body") is not None:
            raw = config["body"]
            body = raw.encode() if isinstance(raw, str) else json.dumps(raw).encode()
        if params:
            url = url + ("&" if "?" in url else "?") + urlencode(params)
        try:
            response = self.pool.request(
                method,
                url,
                body=body,
                headers=headers,
                timeout=_timeout(call.spec.get("timeout")),
                retries=False,
                redirect=True,
            )
        except EgressDenied as exc:
            return Outcome.fail("egress_denied", str(exc), http={"status": None, "headers": {}})
        except urllib3.exceptions.HTTPError as exc:
            failed = Outcome.fail("connection", f"{type(exc).__name__}: {exc}", http={"status": None, "headers": {}})
            return _aimed(failed, url)
        data = _parse(response.headers.get("Content-Type", ""), response.data)
        response_headers = dict(response.headers.items())
        http = {"status": response.status, "headers": response_headers}
        result = {"status_code": response.status, "headers": response_headers, "data": data}
        if response.status >= 400:
            failed = Outcome.fail("http_status", f"{method} answered {response.status}", http=http)
            return _aimed(
                Outcome("error", result, {**(failed.error or {}), "status": response.status}, {}, failed.extra), url
            )
        return Outcome.ok(result, http=http)


def target_of(url: str) -> dict[str, Any]:
    """What a failed request was aimed at (``error.target``: the downstream it counts toward, when a
    subscription declares it): ``{"http_host": host, "http_port": port}``, the host lower-cased."""
    try:
        parsed = urllib3.util.parse_url(url)
    except urllib3.exceptions.LocationParseError:
        return {"http_host": None, "http_port": None}
    host = (parsed.host or "").lower() or None
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme or "")
    return {"http_host": host, "http_port": port}


def _aimed(outcome: Outcome, url: str) -> Outcome:
    return Outcome(
        outcome.status, outcome.result, {**(outcome.error or {}), "target": target_of(url)}, outcome.meta, outcome.extra
    )


class _GuardedConnection(HTTPConnection):
    """Resolves the host once, checks every address with :attr:`egress`, connects to a checked one."""

    egress: ClassVar[EgressPolicy]

    def _new_conn(self) -> socket.socket:
        try:
            addresses = self.egress.addresses(self._dns_host, self.port)  # EgressDenied propagates
        except OSError as exc:
            raise NewConnectionError(self, f"Failed to resolve {self.host}: {exc}") from exc
        error: OSError | None = None
        for address in addresses:
            try:
                return connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, f"Connection to {self.host} timed out") from exc
            except OSError as exc:
                error = exc
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}")


class _GuardedHTTPSConnection(_GuardedConnection, HTTPSConnection):
    """TLS over a checked address; the certificate is still verified against the URL's host name."""


def guarded_pool_manager(egress: EgressPolicy, **kwargs: Any) -> urllib3.PoolManager:
    """A pool manager whose every connection goes through ``egress``."""
    plain = type("GuardedHTTPConnection", (_GuardedConnection,), {"egress": egress})
    tls = type("GuardedHTTPSConnection", (_GuardedHTTPSConnection,), {"egress": egress})
    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = {
        "http": type("GuardedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("GuardedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": tls}),
    }
    return manager


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _timeout(value: Any) -> urllib3.Timeout:
    if isinstance(value, dict):
        return urllib3.Timeout(connect=value.get("connect", DEFAULT_TIMEOUT), read=value.get("read", DEFAULT_TIMEOUT))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return urllib3.Timeout(total=float(value))
    return urllib3.Timeout(total=DEFAULT_TIMEOUT)


def _parse(content_type: str, raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type.lower():
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return text
    return text
