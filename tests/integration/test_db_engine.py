from __future__ import annotations

import socket

from sqlalchemy import Engine, text


def test_every_pooled_connection_has_tcp_nodelay(db_engine: Engine) -> None:
    with db_engine.connect() as a, db_engine.connect() as b:
        for conn in (a, b):
            raw = conn.connection.dbapi_connection
            assert raw._usock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
