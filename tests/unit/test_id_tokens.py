"""ID tokens through google-auth (web/id_tokens.py), against a local stand-in of the metadata server
that google-auth itself talks to (its host and IP overridden as google-auth documents)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from google.auth.compute_engine import _metadata

from noetl_cloud.errors import Unavailable
from noetl_cloud.web.id_tokens import google_id_token_source

ACCOUNT = "/computeMetadata/v1/instance/service-accounts/default/"
IDENTITY = ACCOUNT + "identity"


class MetadataServer:
    """Answers the ping and the identity endpoint as the metadata server does (``Metadata-Flavor: Google``)."""

    def __init__(self) -> None:
        self.exp = time.time() + 3600
        self.minted: list[dict[str, list[str]]] = []
        self.refuse = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, b"missing Metadata-Flavor")
                elif url.path == "/":
                    self._answer(200, b"")
                elif url.path == ACCOUNT:  # the account google-auth's credentials are for
                    info = {"email": "execute@p.iam.gserviceaccount.com", "aliases": ["default"], "scopes": []}
                    self._answer(200, json.dumps(info).encode(), "application/json")
                elif url.path == IDENTITY and not server.refuse:
                    server.minted.append(parse_qs(url.query))
                    claims = {
                        "aud": parse_qs(url.query)["audience"][0],
                        "exp": int(server.exp),
                        "n": len(server.minted),
                    }
                    self._answer(200, jwt.encode(claims, "k" * 32, algorithm="HS256").encode())
                else:
                    self._answer(404, b"not found")

            def _answer(self, status: int, body: bytes, media_type: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def metadata(monkeypatch: pytest.MonkeyPatch) -> Iterator[MetadataServer]:
    server = MetadataServer()
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("GCE_METADATA_IP", server.address)  # the ping's address, read on every ping
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", server.address)  # read once, at import
    yield server
    server.httpd.shutdown()


def test_an_id_token_comes_from_google_auth_and_is_reused_until_5_minutes_before_it_expires(
    metadata: MetadataServer,
) -> None:
    now = [time.time()]
    metadata.exp = now[0] + 3600
    source = google_id_token_source("https://cp.a.run.app", clock=lambda: now[0])
    first = source()
    assert jwt.decode(first, options={"verify_signature": False})["aud"] == "https://cp.a.run.app"
    assert metadata.minted == [{"audience": ["https://cp.a.run.app"], "format": ["full"]}]
    now[0] = metadata.exp - 301
    assert source() == first and len(metadata.minted) == 1
    now[0] += 2  # within 5 minutes of its expiry: a new one
    metadata.exp = now[0] + 3600
    second = source()
    assert second != first and len(metadata.minted) == 2


def test_a_refused_token_is_unavailable_with_a_stable_code(metadata: MetadataServer) -> None:
    metadata.refuse = True
    with pytest.raises(Unavailable) as info:
        google_id_token_source("aud")()
    assert (info.value.status, info.value.code) == (503, "id_token_unavailable")


def test_an_empty_audience_is_refused() -> None:
    with pytest.raises(ValueError):
        google_id_token_source("")
