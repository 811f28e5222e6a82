"""Keep-alive HTTP/1.1 connections to one origin, on the standard library's ``http.client``.

The API client's calls are small JSON requests on loopback or inside one region, so the
per-request cost of the HTTP machinery is what bounds a role's forward path. ``http.client`` sends a
request's head and a bytes body in one segment and does little else; urllib3's pool manager costs
about twice the CPU per call (URL parsing, header dict copies, retry objects) and writes the head
and the body separately, which doubles the receiver's wake-ups. This pool keeps the rest of what
urllib3 gave the client: reuse of idle connections (most recent first, so a burst reuses warm
sockets), a check that an idle connection was not closed by the server before it is reused, a cap
on the idle connections kept, and TLS with certificate verification for ``https`` origins.

Failures are raised as the standard exceptions (``OSError`` subclasses, ``TimeoutError``,
``http.client.HTTPException``); :mod:`noetl_cloud.web.client` decides which are worth a retry.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from email.message import Message

# A server may close an idle keep-alive connection at any time (gunicorn after 2 s); when a reused
# connection fails before any answer came back, the request is sent again once on a new connection.
# Only these mean "the connection was already gone": a timeout or a reset after sending is not retried here.
_DROPPED: tuple[type[BaseException], ...] = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    data: bytes
    headers: Message


class ConnectionPool:
    """A thread-safe pool of keep-alive connections to ``origin`` (``http(s)://host[:port]``)."""

    def __init__(self, origin: str, *, timeout_s: float, maxsize: int = 16) -> None:
        parsed = urllib.parse.urlsplit(origin)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"origin must be an http(s) URL, got {origin!r}")
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port
        self._timeout = timeout_s
        self._maxsize = maxsize
        self._ssl = ssl.create_default_context() if self._https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> RawResponse:
        """Send one request and read the whole answer; the connection goes back to the pool
        unless the server said it closes it."""
        conn, reused = self._checkout()
        try:
            response = self._exchange(conn, method, target, body, headers)
        except _DROPPED:
            conn.close()
            if not reused:
                raise
            conn = self._new()
            try:
                response = self._exchange(conn, method, target, body, headers)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()
        else:
            self._checkin(conn)
        return RawResponse(response.status, response.data, response.headers)

    def close(self) -> None:
        """Close every idle connection (connections in use close when they come back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> _Answer:
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return _Answer(response.status, data, response.headers, response.will_close)

    def _checkout(self) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(), False
            if _still_open(conn):
                return conn, True
            conn.close()

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _new(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    data: bytes
    headers: Message
    will_close: bool


def _still_open(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection has nothing to read: readable means the server closed it (or
    sent bytes nobody asked for); either way it must not carry another request."""
    sock = conn.sock
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)
