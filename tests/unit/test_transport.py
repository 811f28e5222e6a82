"""The API client's connection pool against real sockets on 127.0.0.1: keep-alive reuse, connections
the server closed while idle, a reused connection dropped before the answer, the idle cap."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from noetl_cloud.web.transport import Connection, ConnectionPool

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class RawServer:
    """Accepts connections and hands each to ``serve(conn, index)``; counts connections and requests."""

    def __init__(self, serve: Callable[[socket.socket, int], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self._serve = serve
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True)
            self._threads.append(t)
            t.start()

    def read_request(self, conn: socket.socket) -> bytes | None:
        """One request (head and Content-Length body), or None when the client closed."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += conn.recv(65536)
        self.requests.append(head + b"\r\n\r\n" + rest)
        return rest

    def __enter__(self) -> RawServer:
        self._accept.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.sock.close()


@pytest.fixture
def keep_alive_server() -> Iterator[RawServer]:
    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            while server.read_request(conn) is not None:
                conn.sendall(OK)

    with RawServer(serve) as server:
        yield server


def pool_for(server: RawServer, **kwargs: float) -> ConnectionPool:
    return ConnectionPool(f"http://127.0.0.1:{server.port}", timeout_s=kwargs.get("timeout_s", 5.0))


def test_requests_in_a_row_share_one_keep_alive_connection(keep_alive_server: RawServer) -> None:
    pool = pool_for(keep_alive_server)
    answers = [pool.request("POST", "/api/x", b'{"n":%d}' % i, {"content-type": "application/json"}) for i in range(5)]
    assert [(a.status, a.data) for a in answers] == [(200, b'{"ok":true}')] * 5
    assert keep_alive_server.connections == 1
    assert len(keep_alive_server.requests) == 5
    assert keep_alive_server.requests[3].endswith(b'{"n":3}')
    assert answers[0].headers["content-type"] == "application/json"


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def serve(conn: socket.socket, _index: int) -> None:
        with conn:  # answers one request, then closes without saying so
            if server.read_request(conn) is not None:
                conn.sendall(OK)

    with RawServer(serve) as server:
        pool = pool_for(server)
        first = pool.request("GET", "/a", None, {})
        assert server.requests and first.status == 200
        # wait until the server's close reached us, so the idle check is what is tested
        assert wait_for(lambda: server.connections == 1 and all(not t.is_alive() for t in server._threads))
        conn, reused = pool._checkout()  # the idle connection is found closed and replaced
        assert reused is False and conn.sock is None and pool._idle == []
        pool._checkin(conn)
        second = pool.request("GET", "/b", None, {})
        assert second.status == 200
        assert server.connections == 2
        assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b"]


def test_a_reused_connection_dropped_before_the_answer_is_retried_once_on_a_new_one() -> None:
    def serve(conn: socket.socket, index: int) -> None:
        with conn:
            if server.read_request(conn) is not None:
                conn.sendall(OK)
            if index == 1:
                server.read_request(conn)  # the second request on this connection: read, then drop it
                conn.shutdown(socket.SHUT_RDWR)
                return
            while server.read_request(conn) is not None:
                conn.sendall(OK)

    with RawServer(serve) as server:
        pool = pool_for(server)
        assert pool.request("POST", "/one", b"1", {}).status == 200
        assert pool.request("POST", "/two", b"2", {}).status == 200
        assert server.connections == 2
        assert [r.split(b" ")[1] for r in server.requests] == [b"/one", b"/two", b"/two"]


def test_a_fresh_connection_dropped_before_the_answer_is_raised() -> None:
    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            server.read_request(conn)
            conn.shutdown(socket.SHUT_RDWR)

    with RawServer(serve) as server:
        pool = pool_for(server)
        with pytest.raises(http.client.RemoteDisconnected):
            pool.request("GET", "/x", None, {})
        assert server.connections == 1


def test_a_response_that_closes_the_connection_is_not_pooled() -> None:
    closing = OK.replace(b"Content-Length: 11\r\n", b"Content-Length: 11\r\nConnection: close\r\n")

    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            if server.read_request(conn) is not None:
                conn.sendall(closing)

    with RawServer(serve) as server:
        pool = pool_for(server)
        for _ in range(3):
            assert pool.request("GET", "/x", None, {}).status == 200
        assert server.connections == 3


def test_idle_connections_beyond_the_cap_are_closed(keep_alive_server: RawServer) -> None:
    pool = ConnectionPool(f"http://127.0.0.1:{keep_alive_server.port}", timeout_s=5.0, maxsize=1)
    barrier = threading.Barrier(3)
    conns = [pool._new() for _ in range(3)]
    for conn in conns:
        conn.connect()

    def give_back(conn: Connection) -> None:
        barrier.wait()
        pool._checkin(conn)

    threads = [threading.Thread(target=give_back, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pool._idle) == 1
    assert sum(c.sock is None for c in conns) == 2  # the other two were closed


def test_a_timeout_is_raised_as_timeout_error() -> None:
    release = threading.Event()

    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            server.read_request(conn)
            release.wait(5)

    with RawServer(serve) as server:
        pool = pool_for(server, timeout_s=0.2)
        with pytest.raises(TimeoutError):
            pool.request("GET", "/slow", None, {})
        release.set()


def test_only_http_origins_are_accepted() -> None:
    with pytest.raises(ValueError, match="origin"):
        ConnectionPool("ftp://example.com", timeout_s=1)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    from noetl_cloud.local.process import wait_until

    return wait_until(condition, timeout=timeout, interval=0.005)


def answering(raw: bytes) -> RawServer:
    """A server that answers every request on a connection with ``raw``."""

    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            while server.read_request(conn) is not None:
                conn.sendall(raw)

    server = RawServer(serve)
    return server


def test_a_chunked_answer_is_read_whole_and_the_connection_reused() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"ok\r\n7\r\n":true}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    with answering(chunked) as server:
        pool = pool_for(server)
        assert [pool.request("GET", "/c", None, {}).data for _ in range(2)] == [b'{"ok":true}'] * 2
        assert server.connections == 1


def test_interim_answers_are_skipped_and_header_names_are_case_blind() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nX-Thing: a\r\nx-thing: b\r\nContent-Length: 2\r\n\r\nok"
    )
    with answering(raw) as server:
        answer = pool_for(server).request("POST", "/p", b"{}", {})
        assert (answer.status, answer.data) == (201, b"ok")
        assert answer.headers["X-THING"] == answer.headers.get("x-thing") == "a, b"  # repeated fields joined
        assert "x-Thing" in answer.headers and answer.headers.get("missing") is None


def test_an_answer_without_length_ends_with_the_connection_which_is_not_pooled() -> None:
    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            server.read_request(conn)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")

    with RawServer(serve) as server:
        pool = pool_for(server)
        assert pool.request("GET", "/e", None, {}).data == b"until the end"
        assert pool._idle == []


def test_no_content_and_head_answers_have_no_body() -> None:
    with answering(b"HTTP/1.1 204 No Content\r\n\r\n") as server:
        pool = pool_for(server)
        assert [(a.status, a.data) for a in (pool.request("DELETE", "/d", None, {}) for _ in range(2))] == [
            (204, b"")
        ] * 2
        assert server.connections == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
    ids=["not-http", "bad-status", "negative-length", "bad-field", "cut-short", "bad-chunk"],
)
def test_a_malformed_answer_raises_an_http_exception(raw: bytes) -> None:
    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            server.read_request(conn)
            conn.sendall(raw)
            conn.shutdown(socket.SHUT_WR)

    with RawServer(serve) as server:
        with pytest.raises(http.client.HTTPException):
            pool_for(server).request("GET", "/m", None, {})


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/x HTTP/1.1\r\nHost: evil", {}),
        ("/x", {"x-a": "v\r\nInjected: 1"}),
        ("/x", {"x-a\r\nInjected": "1"}),
        ("/x", {"x:a": "1"}),
    ],
)
def test_a_control_character_in_the_request_is_refused_before_sending(
    keep_alive_server: RawServer, target: str, headers: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match="refusing"):
        pool_for(keep_alive_server).request("GET", target, None, headers)
    assert keep_alive_server.requests == []


def test_the_request_carries_its_line_host_length_and_body(keep_alive_server: RawServer) -> None:
    pool = pool_for(keep_alive_server)
    pool.request("POST", "/api/execute?a=1", b'{"n":1}', {"content-type": "application/json"})
    head, _, body = keep_alive_server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /api/execute?a=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{keep_alive_server.port}".encode() in lines
    assert b"Content-Length: 7" in lines and b"content-type: application/json" in lines
    assert body == b'{"n":1}'
