"""Where an ``http`` task may connect: public addresses, and what the operator allowlisted.

By default an http task reaches only globally routable addresses: loopback, link-local (the cloud
metadata server at ``169.254.169.254``), private (RFC 1918, unique-local IPv6, the carrier-grade NAT
range), unspecified, reserved and multicast addresses are refused. An IPv4 address embedded in an
IPv6 one (mapped, 6to4, Teredo, NAT64) is judged as that IPv4 address.

The check is on the **resolved** address, and the connection is then made to that very address (see
:mod:`noetl_cloud.tools.http`), so a name that resolves to a public address when checked and to the
metadata server when connected (DNS rebinding) cannot slip through; a name one of whose addresses is
refused is refused whole.

``NOETL_HTTP_TOOL_ALLOW`` lists exceptions, comma-separated, each optionally with a port:

- an address or network: ``127.0.0.1``, ``10.8.0.0/16``, ``[::1]:8080``, ``10.0.0.7:443``;
- a host name, matched against the URL's host exactly (case-insensitive): ``orders.internal`` or
  ``orders.internal:8443`` (whatever it resolves to is then allowed: name only hosts you control).

This module is pure apart from the resolver, which is injectable.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\.?$")


class EgressDenied(ValueError):
    """An http task's URL resolves to an address the egress policy refuses."""


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist entry: a network or a host name, and optionally one port."""

    network: IPNetwork | None = None
    host: str | None = None
    port: int | None = None

    def admits(self, host: str, port: int, address: IPAddress) -> bool:
        """Whether this entry allows connecting to ``address:port`` for the URL host ``host``."""
        if self.port is not None and self.port != port:
            return False
        if self.host is not None:
            return self.host == host.lower().rstrip(".")
        assert self.network is not None
        return address.version == self.network.version and address in self.network


def parse_entry(text: str) -> AllowEntry:
    """Parse one allowlist entry; :class:`ValueError` naming the entry when it is not one."""
    raw = text.strip()
    body, port = raw, None
    if raw.startswith("["):
        inside, sep, rest = raw[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"allowlist entry {text!r}: unbalanced brackets")
        body, port = inside, _port(text, rest[1:]) if rest else None
    elif raw.count(":") == 1:
        body, port_text = raw.split(":")
        port = _port(text, port_text)
    try:
        return AllowEntry(network=ipaddress.ip_network(body, strict=False), port=port)
    except ValueError:
        pass
    name = body.lower().rstrip(".")
    if not _HOST_NAME.match(name) or raw.startswith("["):
        raise ValueError(f"allowlist entry {text!r} is not an address, a network or a host name")
    return AllowEntry(host=name, port=port)


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"allowlist entry {entry!r}: bad port {text!r}")
    return int(text)


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable (and not multicast), judging embedded IPv4 as itself."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not (address.is_multicast or address.is_reserved or address.is_unspecified)


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for a TCP connection (what the socket library would try)."""
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class EgressPolicy:
    """Public addresses, plus the allowlist. :meth:`addresses` is the one question the tool asks."""

    allow: tuple[AllowEntry, ...] = ()
    resolve: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_allowlist(cls, entries: Iterable[str], resolve: Resolver = system_resolver) -> EgressPolicy:
        """A policy allowing ``entries`` (the ``NOETL_HTTP_TOOL_ALLOW`` spellings) besides public addresses."""
        return cls(tuple(parse_entry(e) for e in entries if e.strip()), resolve)

    def permits(self, host: str, port: int, address: IPAddress) -> bool:
        """Whether a connection to ``address:port`` for URL host ``host`` is allowed."""
        return is_public(address) or any(entry.admits(host, port, address) for entry in self.allow)

    def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host:port``, each checked; :class:`EgressDenied` when any
        address ``host`` resolves to is refused (:class:`OSError` when it does not resolve)."""
        literal = host.strip("[]")
        resolved = self.resolve(literal, port)
        if not resolved:
            raise OSError(f"{host} resolves to no address")
        for text in resolved:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            if not self.permits(host.strip("[]"), port, address):
                raise EgressDenied(
                    f"{host}:{port} resolves to {address}, which http tasks may not reach "
                    "(loopback, link-local, private or metadata; see NOETL_HTTP_TOOL_ALLOW)"
                )
        return resolved
