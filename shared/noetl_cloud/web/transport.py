"""Keep-alive HTTP/1.1 connections to one origin, on plain sockets.

The API client's calls are small JSON requests on loopback or inside one region, so the per-request
cost of the HTTP machinery is what bounds a role's forward path. This module speaks the part of
HTTP/1.1 those calls need: a request goes out as one ``sendall`` of its head and body; an answer is
read from a buffered reader kept per connection: the status line, the header fields (names
lowercased, a repeated field joined with ``", "``), and a body framed by ``Content-Length``, by the
chunked transfer coding, or by the close of the connection; interim ``1xx`` answers are skipped.
The standard library's ``http.client`` parses each answer's header with the ``email`` package, which
was half of the client's CPU per call (about 70 us of the ingress's forward); urllib3 costs about
twice ``http.client``.

The pool keeps what a client pool needs: reuse of idle connections (most recent first, so a burst
reuses warm sockets), a check that an idle connection was not closed by the server before it is
reused, a cap on the idle connections kept, and TLS with certificate verification for ``https``
origins. A request whose method, target or header carries a control character is refused before
anything is sent (no header injection through a value).

Failures are raised as the standard exceptions (``OSError`` subclasses, ``TimeoutError``, and
``http.client.HTTPException`` subclasses for an answer that is not HTTP/1.x);
:mod:`noetl_cloud.web.client` decides which are worth a retry.
"""

from __future__ import annotations

import http.client
import re
import select
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from typing import BinaryIO

# A server may close an idle keep-alive connection at any time (gunicorn after 2 s); when a reused
# connection fails before any answer came back, the request is sent again once on a new connection.
# Only these mean "the connection was already gone": a timeout or a reset after sending is not retried here.
_DROPPED: tuple[type[BaseException], ...] = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)

_MAX_LINE = 65536  # the longest status line, header line or chunk-size line read
_MAX_HEADERS = 100
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")  # no spaces or controls in a request target
_BAD_FIELD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a header name or value: no CR, LF or other controls
_BLANK = (b"\r\n", b"\n", b"")


class Headers(dict[str, str]):
    """An answer's header fields: names stored lowercased and looked up in any case."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    data: bytes
    headers: Headers


class ConnectionPool:
    """A thread-safe pool of keep-alive connections to ``origin`` (``http(s)://host[:port]``)."""

    def __init__(self, origin: str, *, timeout_s: float, maxsize: int = 16) -> None:
        parsed = urllib.parse.urlsplit(origin)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"origin must be an http(s) URL, got {origin!r}")
        https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if https else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if parsed.port in (None, 443 if https else 80) else f"{host}:{parsed.port}"
        self._timeout = timeout_s
        self._maxsize = maxsize
        self._ssl = ssl.create_default_context() if https else None
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> RawResponse:
        """Send one request and read the whole answer; the connection goes back to the pool
        unless the server said it closes it."""
        message = self._message(method, target, body, headers)
        conn, reused = self._checkout()
        try:
            answer = conn.exchange(message, method)
        except _DROPPED:
            conn.close()
            if not reused:
                raise
            conn = self._new()
            try:
                answer = conn.exchange(message, method)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        status, data, fields, will_close = answer
        if will_close:
            conn.close()
        else:
            self._checkin(conn)
        return RawResponse(status, data, fields)

    def close(self) -> None:
        """Close every idle connection (connections in use close when they come back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _message(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> bytes:
        if not method.isalpha() or _BAD_TARGET.search(target) or not target:
            raise ValueError(f"refusing to send a request line with a control character: {method!r} {target!r}")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        for name, value in headers.items():
            if not name or _BAD_FIELD.search(name) or _BAD_FIELD.search(value) or ":" in name:
                raise ValueError(f"refusing to send the header {name!r}: it holds a control character or a colon")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    def _checkout(self) -> tuple[Connection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(), False
            if _still_open(conn):
                return conn, True
            conn.close()

    def _checkin(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _new(self) -> Connection:
        return Connection(self._host, self._port, self._timeout, self._ssl)


class Connection:
    """One HTTP/1.1 connection: its socket (opened on first use) and the buffered reader of its answers."""

    __slots__ = ("_context", "_host", "_port", "_reader", "_timeout", "sock")

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None) -> None:
        self._host = host
        self._port = port
        self._timeout = timeout
        self._context = context
        self.sock: socket.socket | None = None
        self._reader: BinaryIO | None = None

    def connect(self) -> None:
        sock = socket.create_connection((self._host, self._port), self._timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._reader = sock.makefile("rb")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def exchange(self, message: bytes, method: str) -> tuple[int, bytes, Headers, bool]:
        """Send a whole request; read its answer: status, body, header fields, whether the server closes."""
        if self.sock is None:
            self.connect()
        assert self.sock is not None and self._reader is not None
        self.sock.sendall(message)
        reader = self._reader
        while True:
            line = reader.readline(_MAX_LINE + 1)
            if not line:
                raise http.client.RemoteDisconnected("the server closed the connection without an answer")
            version, _, rest = line.rstrip(b"\r\n").partition(b" ")
            code = rest[:3]
            if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit() or len(line) > _MAX_LINE:
                raise http.client.BadStatusLine(line[:200].decode("latin-1"))
            status = int(code)
            fields = _read_fields(reader)
            if status >= 200 or status == 101:
                break  # 100 Continue and other interim answers come before the real one
        tokens = {t.strip().lower() for t in (fields.get("connection") or "").split(",")}
        will_close = "close" in tokens or (version == b"HTTP/1.0" and "keep-alive" not in tokens)
        if method == "HEAD" or status in (204, 304) or status < 200:
            return status, b"", fields, will_close
        if "chunked" in (fields.get("transfer-encoding") or "").lower():
            return status, _read_chunked(reader), fields, will_close
        length = fields.get("content-length")
        if length is None:  # framed by the close of the connection
            return status, reader.read(), fields, True
        size = int(length) if length.isdigit() else -1
        if size < 0:
            raise http.client.HTTPException(f"bad Content-Length {length[:40]!r}")
        data = reader.read(size)
        if len(data) < size:
            raise http.client.IncompleteRead(data, size - len(data))
        return status, data, fields, will_close


def _read_fields(reader: BinaryIO) -> Headers:
    fields = Headers()
    for _ in range(_MAX_HEADERS + 1):
        line = reader.readline(_MAX_LINE + 1)
        if line in _BLANK:
            return fields
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        name, sep, value = line.partition(b":")
        if not sep:
            raise http.client.HTTPException(f"malformed header line {line[:80]!r}")
        key = name.strip().decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        previous = dict.get(fields, key)
        dict.__setitem__(fields, key, text if previous is None else f"{previous}, {text}")
    raise http.client.HTTPException(f"more than {_MAX_HEADERS} header fields")


def _read_chunked(reader: BinaryIO) -> bytes:
    parts: list[bytes] = []
    while True:
        line = reader.readline(_MAX_LINE + 1)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.IncompleteRead(b"".join(parts)) from None
        if size == 0:
            while reader.readline(_MAX_LINE + 1) not in _BLANK:  # trailer fields, ignored
                pass
            return b"".join(parts)
        chunk = reader.read(size)
        if len(chunk) < size or reader.read(2) != b"\r\n":
            raise http.client.IncompleteRead(b"".join(parts) + chunk)
        parts.append(chunk)


def _still_open(conn: Connection) -> bool:
    """An idle keep-alive connection has nothing to read: readable means the server closed it (or
    sent bytes nobody asked for); either way it must not carry another request."""
    sock = conn.sock
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)
