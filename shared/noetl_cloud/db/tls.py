"""TLS to PostgreSQL for pg8000 engines, from libpq's ``sslmode`` (and ``sslrootcert``) in the URL.

pg8000 takes no ``sslmode``: a URL carrying one failed every connection (``connect() got an
unexpected keyword argument``). Without one, pg8000 asks every server for TLS and builds a new
``ssl.create_default_context()`` for each connection to do it, loading the system's CA store each
time (about 17 ms of CPU measured here), even when the server then refuses TLS, as a local server
does. :func:`tls_engine` reads the mode from the URL, builds each distinct context once per process,
and remembers per engine that a server refused TLS, so only the first connection pays the probe.

==============  =============================================================================
``sslmode``     what the engine does
==============  =============================================================================
``disable``     plain TCP
``allow``,      (the default when the URL says nothing, as libpq's ``prefer``) TLS without
``prefer``      certificate checks when the server offers it, else plain TCP; after a refusal
                the engine's later connections go plain without asking
``require``     TLS without certificate checks; a server refusing TLS is an error
``verify-ca``   TLS, the server's chain checked against ``sslrootcert`` (else the system's CAs)
``verify-full`` as ``verify-ca``, and the host name checked against the certificate
==============  =============================================================================

Engines through the Cloud SQL connector get their TLS from the connector and skip all this.
"""

from __future__ import annotations

import ssl
import threading
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from noetl_cloud.errors import ConfigError

MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_OPTIONAL = frozenset({"allow", "prefer"})
_REFUSED = "Server refuses SSL"  # pg8000's InterfaceError text when the server answers 'N'


def split_tls(url: str | URL) -> tuple[URL, str, str | None]:
    """``url`` without ``sslmode``/``sslrootcert``, the mode (``prefer`` when absent) and the root
    certificate file; :class:`ConfigError` ``config_invalid`` for a mode libpq does not know."""
    parsed = make_url(url) if isinstance(url, str) else url
    mode = str(parsed.query.get("sslmode") or "prefer")
    if mode not in MODES:
        raise ConfigError(
            f"sslmode '{mode}' in the database URL is not one of {', '.join(MODES)}",
            code="config_invalid",
            details={"sslmode": mode},
        )
    rootcert = parsed.query.get("sslrootcert")
    return parsed.difference_update_query(["sslmode", "sslrootcert"]), mode, str(rootcert) if rootcert else None


@lru_cache(maxsize=8)
def context(mode: str, rootcert: str | None = None) -> ssl.SSLContext:
    """The process's one TLS context for ``mode`` (not ``disable``), built on first use."""
    if mode in ("verify-ca", "verify-full"):
        ctx = ssl.create_default_context(cafile=rootcert)
        ctx.check_hostname = mode == "verify-full"
        return ctx
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class _Negotiator:
    """The ``do_connect`` hook of one engine: sets pg8000's ``ssl_context`` for the mode."""

    def __init__(self, mode: str, rootcert: str | None) -> None:
        self.mode, self.rootcert = mode, rootcert
        self.refused = False  # an optional-TLS server said no once: ask it no more
        self._lock = threading.Lock()

    def __call__(self, dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        if self.mode == "disable" or self.refused:
            cparams["ssl_context"] = False
            return None
        cparams["ssl_context"] = context(self.mode, self.rootcert)
        if self.mode not in _OPTIONAL:
            return None
        try:
            return dialect.dbapi.connect(*cargs, **cparams)
        except dialect.dbapi.InterfaceError as exc:
            if _REFUSED not in str(exc):
                raise
        with self._lock:
            self.refused = True
        cparams["ssl_context"] = False
        return None  # SQLAlchemy connects with the plain-TCP parameters


def tls_engine(url: str | URL, **options: Any) -> Engine:
    """``create_engine`` for a pg8000 URL that may carry ``sslmode``/``sslrootcert`` (see the module)."""
    bare, mode, rootcert = split_tls(url)
    engine = create_engine(bare, **options)
    event.listen(engine, "do_connect", _Negotiator(mode, rootcert))
    return engine
